//! `kura init / backup / snapshots / restore / ls / diff / stats / check / forget / prune`: the
//! repository commands. One file per command; this file turns the common flags into a
//! storage handle, through the gateway at --endpoint or one started in this process.

pub mod backup;
pub mod check;
pub mod diff;
pub mod forget;
pub mod init;
pub mod ls;
pub mod prune;
pub mod restore;
pub mod snapshots;
pub mod stats;

use anyhow::{Context as _, Result};
use kura_repo::{S3Backend, S3Location};

use crate::args::{GatewayArgs, RepoArgs};

/// Storage for the repository, and the in-process gateway behind it when there is one
/// (it serves until this value is dropped).
pub struct Connection {
    pub backend: S3Backend,
    _gateway: Option<kura_gateway::server::Running>,
}

/// Connects as the flags say: --endpoint with its credentials, or an in-process gateway on
/// loopback in front of --upstream (with --key-file) or the embedded default (--data-dir).
pub async fn connect(args: &RepoArgs) -> Result<Connection> {
    let (bucket, prefix) = S3Location::parse_repo(&args.repo)?;
    if let Some(endpoint) = &args.endpoint {
        let access_key = args
            .access_key_id
            .clone()
            .context("--access-key-id (or KURA_ACCESS_KEY_ID) is required with --endpoint")?;
        let secret_key = std::env::var("KURA_SECRET_ACCESS_KEY").context(
            "KURA_SECRET_ACCESS_KEY is not set (the gateway secret for --access-key-id)",
        )?;
        let backend = S3Backend::new(&S3Location {
            endpoint: endpoint.clone(),
            bucket,
            prefix,
            access_key,
            secret_key,
        });
        return Ok(Connection {
            backend,
            _gateway: None,
        });
    }
    let gateway_args = GatewayArgs {
        upstream: args.upstream.clone(),
        upstream_region: args.upstream_region.clone(),
        path_style: args.path_style,
        key_file: args.key_file.clone(),
        data_dir: Some(args.data_dir.clone()),
        ..GatewayArgs::default()
    };
    let (config, access_key, secret_key) = crate::gateway::in_process(&gateway_args)?;
    let running = kura_gateway::server::start(config)
        .await
        .context("starting the in-process gateway")?;
    let backend = S3Backend::new(&S3Location {
        endpoint: format!("http://{}", running.addr),
        bucket,
        prefix,
        access_key,
        secret_key,
    });
    Ok(Connection {
        backend,
        _gateway: Some(running),
    })
}

/// Connects and opens the repository at `--repo`, with the location in the error.
pub async fn open(args: &RepoArgs) -> Result<(kura_repo::Repository<S3Backend>, Connection)> {
    let conn = connect(args).await?;
    let repo = kura_repo::Repository::open(conn.backend.clone())
        .await
        .with_context(|| format!("opening {}", args.repo))?;
    Ok((repo, conn))
}

/// A multi-thread runtime (backup reads on its own thread while packs upload).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

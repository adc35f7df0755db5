//! `kura init / backup / snapshots / restore / ls / diff / stats / check / forget / prune /
//! repair`: the repository commands. One file per command; this file turns the common
//! flags into a storage handle, through the gateway at --endpoint or one started in this
//! process.

pub mod backup;
pub mod check;
pub mod config;
pub mod diff;
pub mod forget;
pub mod init;
pub mod ls;
pub mod prune;
pub mod repair;
pub mod restore;
pub mod snapshots;
pub mod stats;

use anyhow::{Context as _, Result};
use kura_repo::{S3Location, S3Storage};

use crate::args::{FilterArgs, GatewayArgs, RepoArgs};

/// Storage for the repository, and the in-process gateway behind it when there is one
/// (it serves until this value is dropped).
pub struct Connection {
    pub storage: S3Storage,
    /// `s3://BUCKET/PREFIX`, for messages.
    pub repository: String,
    _gateway: Option<kura_gateway::server::Running>,
}

/// Connects as flags, environment and config file say (see [`config`]): a running gateway,
/// or one started in this process on loopback.
pub async fn connect(args: &RepoArgs) -> Result<Connection> {
    let loc = config::resolve(args)?;
    let (bucket, prefix) = S3Location::parse_repo(&loc.repository)?;
    let (endpoint, access_key, secret_key, gateway) = match loc.target {
        config::Target::Endpoint {
            url,
            access_key,
            secret,
        } => (url, access_key, secret, None),
        config::Target::Upstream {
            url,
            region,
            path_style,
            key_file,
        } => {
            let gateway = GatewayArgs {
                upstream: Some(url),
                upstream_region: region,
                path_style: Some(path_style),
                key_file,
                ..GatewayArgs::default()
            };
            start_gateway(&gateway).await?
        }
        config::Target::Embedded { data_dir } => {
            let gateway = GatewayArgs {
                data_dir: Some(data_dir),
                ..GatewayArgs::default()
            };
            start_gateway(&gateway).await?
        }
    };
    let storage = S3Storage::new(&S3Location {
        endpoint,
        bucket,
        prefix,
        access_key,
        secret_key,
    })
    .with_retry_for(loc.retry_for);
    Ok(Connection {
        storage,
        repository: loc.repository,
        _gateway: gateway,
    })
}

/// Starts a gateway on a loopback port: its URL, the one-off credential and the handle.
async fn start_gateway(
    args: &GatewayArgs,
) -> Result<(
    String,
    String,
    kura_keys::secret::Secret,
    Option<kura_gateway::server::Running>,
)> {
    let (upstream, keyring) = crate::gateway::in_process(args)?;
    let gateway = kura_gateway::embedded::start_in_process(upstream, keyring).await?;
    Ok((
        gateway.endpoint,
        gateway.access_key,
        gateway.secret_key,
        Some(gateway.running),
    ))
}

/// Connects and opens the repository, with its location in the error.
pub async fn open(args: &RepoArgs) -> Result<(kura_repo::Repository<S3Storage>, Connection)> {
    let conn = connect(args).await?;
    let repo = kura_repo::Repository::open(conn.storage.clone())
        .await
        .with_context(|| format!("opening {}", conn.repository))?;
    Ok((repo, conn))
}

/// As [`open`], without reading the index (which may not read: `kura repair index`).
pub async fn open_unindexed(
    args: &RepoArgs,
) -> Result<(kura_repo::Repository<S3Storage>, Connection)> {
    let conn = connect(args).await?;
    let repo = kura_repo::Repository::open_unindexed(conn.storage.clone())
        .await
        .with_context(|| format!("opening {}", conn.repository))?;
    Ok((repo, conn))
}

/// A multi-thread runtime (backup reads on its own thread while packs upload).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Tells the user when this host's clock is far from the storage's (measured by commands
/// that take a lease or a session): snapshot times are this host's, and `forget`'s
/// time-based rules judge them.
pub fn warn_clock_skew<S: kura_repo::Storage>(repo: &kura_repo::Repository<S>) {
    if let Some(skew) = repo.progress().clock_skew() {
        let (ahead, secs) = if skew > 0 {
            ("ahead of", skew)
        } else {
            ("behind", -skew)
        };
        eprintln!(
            "kura: warning: this host's clock is {secs} s {ahead} the storage's; snapshot times \
             come from this clock (kura judges every age by the storage's clock)"
        );
    }
}

/// `a,b` lists as given to `--tag` and `--keep-tag`: each one's tags.
pub fn tag_lists(args: &[String]) -> Vec<Vec<String>> {
    args.iter()
        .map(|l| {
            l.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// The `--host`, `--path` and `--tag` filters as the library takes them.
pub fn filter(args: &FilterArgs) -> kura_repo::SnapshotFilter {
    kura_repo::SnapshotFilter {
        hosts: args.hosts.clone(),
        paths: args.paths.clone(),
        tags: tag_lists(&args.tags),
    }
}

/// The snapshot `name` names among those the filters match (one resolver for `restore`,
/// `ls` and `diff`); see [`resolve`].
pub async fn find_snapshot<S: kura_repo::Storage>(
    repo: &kura_repo::Repository<S>,
    name: &str,
    args: &FilterArgs,
) -> Result<(kura_repo::Id, kura_repo::Snapshot)> {
    resolve(repo, name, &filter(args)).await
}

/// The snapshot `name` names among those `filter` matches; an ambiguous `latest` lists
/// its candidates on stderr, one line per host and paths, before the error.
pub async fn resolve<S: kura_repo::Storage>(
    repo: &kura_repo::Repository<S>,
    name: &str,
    filter: &kura_repo::SnapshotFilter,
) -> Result<(kura_repo::Id, kura_repo::Snapshot)> {
    match repo.resolve_snapshot(name, filter).await {
        Err(kura_repo::RepoError::AmbiguousLatest { candidates }) => {
            for c in &candidates {
                eprintln!("kura: candidate: {c}");
            }
            Err(kura_repo::RepoError::AmbiguousLatest { candidates }.into())
        }
        found => Ok(found?),
    }
}

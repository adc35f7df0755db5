//! `kura init / backup / snapshots / restore`: the repository commands. One file per
//! command; this file turns the common flags into an opened storage handle.

pub mod backup;
pub mod check;
pub mod forget;
pub mod init;
pub mod ls;
pub mod prune;
pub mod restore;
pub mod snapshots;

use anyhow::{Context as _, Result};
use kura_repo::{S3Backend, S3Location};

use crate::args::RepoArgs;

/// The storage for `--repo` through `--endpoint`, with the secret from the environment.
pub fn backend(args: &RepoArgs) -> Result<S3Backend> {
    let (bucket, prefix) = S3Location::parse_repo(&args.repo)?;
    let secret_key = std::env::var("KURA_SECRET_ACCESS_KEY")
        .context("KURA_SECRET_ACCESS_KEY is not set (the gateway secret for --access-key-id)")?;
    Ok(S3Backend::new(&S3Location {
        endpoint: args.endpoint.clone(),
        bucket,
        prefix,
        access_key: args.access_key_id.clone(),
        secret_key,
    }))
}

/// Opens the repository at `--repo`, with the location in the error.
pub async fn open(args: &RepoArgs, backend: S3Backend) -> Result<kura_repo::Repository<S3Backend>> {
    kura_repo::Repository::open(backend)
        .await
        .with_context(|| format!("opening {}", args.repo))
}

/// A multi-thread runtime (backup reads on its own thread while packs upload).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

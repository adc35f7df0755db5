//! The storage's clock (FORMAT.md section 9.3): every age the repository judges (a lease's,
//! a session's, a prune mark's, a pack's) is a difference of two times the storage gave,
//! never one host's clock against another's. Here: reading the storage's "now", and
//! telling the user when this host's clock is far from it.

use bytes::Bytes;

use crate::error::{RepoError, Result};
use crate::progress::Progress;
use crate::storage::{FileType, Storage};

/// How far this host's clock may be from the storage's before the user is told: beyond
/// it, snapshot times (which are this host's) mislead `forget`'s time-based rules.
pub(crate) const SKEW_WARNING_SECS: i64 = 120;

/// A random hex token naming a lease's or a session's objects.
pub(crate) fn token() -> Result<String> {
    let mut token = [0u8; 16];
    kura_keys::rand::fill(&mut token).map_err(|_| RepoError::Random)?;
    Ok(hex::encode(token))
}

/// The storage's clock: the Last-Modified (Unix seconds) of a probe object
/// `clock-TOKEN` written under `ft` now and deleted again.
pub(crate) async fn storage_now<S: Storage>(
    storage: &S,
    ft: FileType,
    token: &str,
    progress: &Progress,
) -> Result<i64> {
    let name = format!("clock-{token}");
    storage.put(ft, &name, Bytes::from_static(b"{}")).await?;
    let now = written_at(storage, ft, &name, progress).await?;
    storage.delete(ft, &name).await?;
    Ok(now)
}

/// The Last-Modified of `name`, just written, as the storage's "now"; records how far this
/// host's clock is from it.
pub(crate) async fn written_at<S: Storage>(
    storage: &S,
    ft: FileType,
    name: &str,
    progress: &Progress,
) -> Result<i64> {
    let now = storage
        .modified(ft, name)
        .await?
        .ok_or_else(|| RepoError::Storage {
            op: "HeadObject",
            key: ft.path(name),
            detail: "an object just written is not there (the storage must read after write)"
                .into(),
        })?;
    progress.set_clock_skew(local_now().saturating_sub(now));
    Ok(now)
}

fn local_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

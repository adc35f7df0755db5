//! The upkeep lease: one `prune` or `forget` at a time per repository (FORMAT.md section
//! 9.1). Two prunes at once could each rewrite the same index objects and leave an index
//! that names packs the other deleted.
//!
//! A lease is an object `lease/N`, created with a conditional PUT (`If-None-Match: *`), so
//! that of two runs taking generation `N` exactly one wins. Its holder rewrites it every
//! [`REFRESH_EVERY`]; it is stale once the storage's clock is [`LEASE_TTL`] past its
//! Last-Modified. Ages are judged in storage time only: "now" is the Last-Modified of a
//! probe object written for the purpose, never this host's clock. A run that finds a
//! stale lease takes generation `N + 1` and deletes the stale one, so the paused holder,
//! when it resumes, finds its lease gone (or a newer one) at its next [`Lease::check`] and
//! stops before it deletes anything.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::error::{RepoError, Result};
use crate::progress::Progress;
use crate::storage::{FileType, Storage};

/// How long a lease lives without being refreshed.
pub(crate) const LEASE_TTL: Duration = Duration::from_mins(5);
/// How often a holder refreshes its lease: several refreshes fit in one [`LEASE_TTL`].
pub(crate) const REFRESH_EVERY: Duration = Duration::from_mins(1);

#[derive(Serialize, Deserialize)]
struct LeaseJson {
    /// Who holds it: host name and process ID, for the message a second run prints.
    holder: String,
    /// `prune` or `forget`.
    command: String,
    /// The holder's lifetime without a refresh, in seconds of storage time.
    ttl_secs: u64,
    /// Random, so that two runs on one host write different bytes.
    token: String,
}

/// A held lease. Refreshed in the background until [`Lease::release`] (or drop, which
/// stops the refreshes and leaves the lease to go stale).
pub(crate) struct Lease<S: Storage> {
    storage: Arc<S>,
    generation: u64,
    /// Names this run's clock probes.
    token: String,
    progress: Arc<Progress>,
    refresher: tokio::task::JoinHandle<()>,
}

impl<S: Storage> Drop for Lease<S> {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

/// Leases present, by generation.
async fn generations<S: Storage>(storage: &S) -> Result<Vec<u64>> {
    let mut out: Vec<u64> = storage
        .list(FileType::Lease)
        .await?
        .into_iter()
        .filter_map(|(name, _)| name.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown host".into(), |h| h.trim().to_string());
    format!("{host}, process {}", std::process::id())
}

impl<S: Storage> Lease<S> {
    /// Takes the repository's upkeep lease for `command`.
    ///
    /// # Errors
    /// [`RepoError::Busy`], naming the holder, when a live lease is there; storage errors.
    pub(crate) async fn acquire(
        storage: &Arc<S>,
        command: &str,
        progress: &Arc<Progress>,
    ) -> Result<Self> {
        let token = clock::token()?;
        let body = Bytes::from(
            serde_json::to_vec(&LeaseJson {
                holder: holder(),
                command: command.into(),
                ttl_secs: LEASE_TTL.as_secs(),
                token: token.clone(),
            })
            .expect("a lease serializes"),
        );
        let present = generations(storage.as_ref()).await?;
        let now = clock::storage_now(storage.as_ref(), FileType::Lease, &token, progress).await?;
        for &g in &present {
            if let Some(busy) = live(storage.as_ref(), g, now).await? {
                return Err(busy);
            }
        }
        let generation = present.last().map_or(1, |g| g + 1);
        if !storage
            .create(FileType::Lease, &generation.to_string(), body.clone())
            .await?
        {
            // Another run took this generation between our listing and our create.
            let busy = live(storage.as_ref(), generation, i64::MIN).await?;
            return Err(busy.unwrap_or_else(|| RepoError::Busy {
                holder: "another run".into(),
                command: "prune or forget".into(),
                age_secs: 0,
            }));
        }
        // The stale holders find their lease gone at their next check.
        for g in present {
            storage.delete(FileType::Lease, &g.to_string()).await?;
        }
        let refresher = {
            let storage = storage.clone();
            let name = generation.to_string();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(REFRESH_EVERY).await;
                    // A failed refresh is retried at the next tick; a lease that goes
                    // stale meanwhile is caught by `check` before anything is deleted.
                    let _ = storage.put(FileType::Lease, &name, body.clone()).await;
                }
            })
        };
        Ok(Self {
            storage: storage.clone(),
            generation,
            token,
            progress: progress.clone(),
            refresher,
        })
    }

    /// The storage's clock now (FORMAT.md section 9.3), in Unix seconds.
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn storage_now(&self) -> Result<i64> {
        clock::storage_now(
            self.storage.as_ref(),
            FileType::Lease,
            &self.token,
            &self.progress,
        )
        .await
    }

    /// Whether this run still holds the lease: its object is there and no newer
    /// generation is. Called before every step that deletes or rewrites.
    ///
    /// # Errors
    /// [`RepoError::LeaseLost`] when another run took over (this one was paused past the
    /// lease's lifetime); storage errors.
    pub(crate) async fn check(&self) -> Result<()> {
        let present = generations(self.storage.as_ref()).await?;
        if present.last() == Some(&self.generation) {
            Ok(())
        } else {
            Err(RepoError::LeaseLost)
        }
    }

    /// Stops the refreshes and deletes the lease.
    ///
    /// # Errors
    /// Storage errors (the lease then goes stale on its own).
    pub(crate) async fn release(self) -> Result<()> {
        self.refresher.abort();
        self.storage
            .delete(FileType::Lease, &self.generation.to_string())
            .await
    }
}

/// `Some(Busy)` when lease `generation` is live at storage time `now` (`i64::MIN`: treat
/// any lease found as live).
async fn live<S: Storage>(storage: &S, generation: u64, now: i64) -> Result<Option<RepoError>> {
    let name = generation.to_string();
    let Some(modified) = storage.modified(FileType::Lease, &name).await? else {
        return Ok(None);
    };
    let lease: LeaseJson = match storage.get(FileType::Lease, &name).await {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| RepoError::corrupt(format!("lease/{name}"), e))?,
        Err(RepoError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let age = now.saturating_sub(modified);
    let ttl = i64::try_from(lease.ttl_secs).unwrap_or(i64::MAX);
    if now != i64::MIN && age > ttl {
        return Ok(None);
    }
    Ok(Some(RepoError::Busy {
        holder: lease.holder,
        command: lease.command,
        age_secs: u64::try_from(age.max(0)).unwrap_or(0),
    }))
}

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
//! when it resumes, finds a newer one at its next [`Lease::check`] and stops before it
//! deletes anything.
//!
//! Generations only grow: a holder releases its lease by rewriting it as released, not by
//! deleting it, and the next run deletes it only after it created `N + 1`. A paused
//! holder's refresher may write its old `lease/N` again as it resumes; a higher
//! generation is there all the same. (When releasing deleted the lease, the next run took
//! `lease/1` again, or the paused holder's `lease/N` was the only one left, and its check
//! passed.)

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
    /// Set by its holder when it ended: not live, whatever its age. Written with
    /// `ttl_secs` 0, so that a reader that does not know the field takes it for stale.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    released: bool,
}

/// A held lease. Refreshed in the background until [`Lease::release`] (or drop, which
/// stops the refreshes and leaves the lease to go stale).
pub(crate) struct Lease<S: Storage> {
    storage: Arc<S>,
    generation: u64,
    /// Names this run's clock probes.
    token: String,
    /// What the lease becomes when it is released.
    released: Bytes,
    progress: Arc<Progress>,
    /// Tells the refresher to stop after the refresh in flight, if any.
    stop: tokio::sync::watch::Sender<bool>,
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
        let mut json = LeaseJson {
            holder: holder(),
            command: command.into(),
            ttl_secs: LEASE_TTL.as_secs(),
            token: token.clone(),
            released: false,
        };
        let body = Bytes::from(serde_json::to_vec(&json).expect("a lease serializes"));
        (json.ttl_secs, json.released) = (0, true);
        let released = Bytes::from(serde_json::to_vec(&json).expect("a lease serializes"));
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
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let refresher = {
            let storage = storage.clone();
            let name = generation.to_string();
            tokio::spawn(async move {
                // Until told to stop (or the lease is dropped), never in the middle of a
                // refresh: one that landed after the release would make the lease live
                // again.
                while tokio::time::timeout(REFRESH_EVERY, stopped.changed())
                    .await
                    .is_err()
                {
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
            released,
            progress: progress.clone(),
            stop,
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

    /// Stops the refreshes, then marks the lease released, where it is still the highest
    /// generation: it stays, so that the next run takes a higher one. A lease taken over
    /// meanwhile is deleted instead, if its refresher wrote it again.
    ///
    /// # Errors
    /// Storage errors (the lease then goes stale on its own).
    pub(crate) async fn release(mut self) -> Result<()> {
        self.stop.send_replace(true);
        // Ended by the stop (or aborted by a panic in the runtime): either way not running.
        let _ = (&mut self.refresher).await;
        let name = self.generation.to_string();
        match self.check().await {
            Ok(()) => {
                self.storage
                    .put(FileType::Lease, &name, self.released.clone())
                    .await
            }
            Err(RepoError::LeaseLost) => self.storage.delete(FileType::Lease, &name).await,
            Err(e) => Err(e),
        }
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
    if lease.released || (now != i64::MIN && age > ttl) {
        return Ok(None);
    }
    Ok(Some(RepoError::Busy {
        holder: lease.holder,
        command: lease.command,
        age_secs: u64::try_from(age.max(0)).unwrap_or(0),
    }))
}

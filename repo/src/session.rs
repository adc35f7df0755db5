//! Backup sessions (FORMAT.md section 9.2): a running backup says so in an object
//! `session/TOKEN` that it rewrites while it runs, so that a prune's deleting phase keeps
//! every mark such a backup may rely on. The session records when it started, in storage
//! time; a prune keeps a mark whose object is no older than the start of any live session
//! (that backup read the marks before the mark existed, and may rely on its packs).
//!
//! A session is live until the storage's clock is its timeout past its Last-Modified. A
//! backup that is paused (laptop sleep, a stopped VM, SIGSTOP) or cut off from the storage
//! for longer lets its session go stale, and a prune may then delete what it relies on.
//! It finds out from its own refreshes: the Last-Modified of each refresh is storage time,
//! and a gap between two of them as long as the timeout means that a prune could have seen
//! the session stale. [`Session::confirm`] reports it, and the backup keeps no snapshot.
//! The walk confirms it around each index object too ([`Confirmer`]): the packs a lapsed
//! backup had not indexed yet look unused to a prune, and an index object naming them
//! after their deletion would make later backups rely on packs that are gone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::error::{RepoError, Result};
use crate::progress::Progress;
use crate::storage::{FileType, Storage};

#[derive(Serialize, Deserialize)]
struct SessionJson {
    /// Host and process, for people reading the bucket.
    holder: String,
    /// `backup`.
    command: String,
    /// When the session started: the Last-Modified (Unix seconds) of its first write.
    /// Absent in that first write, whose reader takes it as "before every mark".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started: Option<i64>,
    /// The session's timeout in seconds: the repository's, or longer.
    timeout_secs: u64,
}

/// The refreshes seen so far, in storage time.
struct Refreshes {
    /// Last-Modified of the latest refresh.
    last: i64,
    /// The longest gap between two refreshes.
    longest_gap: i64,
}

impl Refreshes {
    fn record(&mut self, at: i64) {
        self.longest_gap = self.longest_gap.max(at.saturating_sub(self.last));
        self.last = self.last.max(at);
    }
}

/// A running backup's session, refreshed in the background until [`Session::close`] (or
/// drop, which stops the refreshes and leaves the object to go stale).
pub(crate) struct Session<S: Storage> {
    check: Confirmer<S>,
    refresher: tokio::task::JoinHandle<()>,
}

/// What [`Session::confirm`] needs, apart from the session, for the backup's walk: it
/// confirms the session around each index object it writes ([`Session::confirmer`]).
pub(crate) struct Confirmer<S: Storage> {
    storage: Arc<S>,
    name: String,
    body: Bytes,
    timeout: Duration,
    refreshes: Arc<Mutex<Refreshes>>,
    progress: Arc<Progress>,
}

impl<S: Storage> Clone for Confirmer<S> {
    fn clone(&self) -> Self {
        Self {
            storage: self.storage.clone(),
            name: self.name.clone(),
            body: self.body.clone(),
            timeout: self.timeout,
            refreshes: self.refreshes.clone(),
            progress: self.progress.clone(),
        }
    }
}

impl<S: Storage> Drop for Session<S> {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown host".into(), |h| h.trim().to_string());
    format!("{host}, process {}", std::process::id())
}

/// Writes the session object `name` and returns its Last-Modified.
async fn write<S: Storage>(
    storage: &S,
    name: &str,
    body: &Bytes,
    progress: &Progress,
) -> Result<i64> {
    storage.put(FileType::Session, name, body.clone()).await?;
    clock::written_at(storage, FileType::Session, name, progress).await
}

impl<S: Storage> Session<S> {
    /// Opens a session with `timeout` (the repository's session timeout).
    ///
    /// # Errors
    /// Storage errors; no randomness.
    pub(crate) async fn open(
        storage: &Arc<S>,
        timeout: Duration,
        progress: &Arc<Progress>,
    ) -> Result<Self> {
        let name = clock::token()?;
        let mut json = SessionJson {
            holder: holder(),
            command: "backup".into(),
            started: None,
            timeout_secs: timeout.as_secs(),
        };
        let first = Bytes::from(serde_json::to_vec(&json).expect("a session serializes"));
        let started = write(storage.as_ref(), &name, &first, progress).await?;
        json.started = Some(started);
        let body = Bytes::from(serde_json::to_vec(&json).expect("a session serializes"));
        let at = write(storage.as_ref(), &name, &body, progress).await?;
        let refreshes = Arc::new(Mutex::new(Refreshes {
            last: started,
            longest_gap: 0,
        }));
        refreshes.lock().expect("not poisoned").record(at);
        let ticking = {
            let (storage, name, body) = (storage.clone(), name.clone(), body.clone());
            let (refreshes, progress) = (refreshes.clone(), progress.clone());
            let every = (timeout / 5).max(Duration::from_millis(200));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    // A failed refresh is retried at the next tick; a gap that grows to
                    // the timeout meanwhile shows at the next one that succeeds.
                    if let Ok(at) = write(storage.as_ref(), &name, &body, &progress).await {
                        refreshes.lock().expect("not poisoned").record(at);
                    }
                }
            })
        };
        Ok(Self {
            check: Confirmer {
                storage: storage.clone(),
                name,
                body,
                timeout,
                refreshes,
                progress: progress.clone(),
            },
            refresher: ticking,
        })
    }

    /// [`Confirmer::confirm`].
    ///
    /// # Errors
    /// [`RepoError::SessionLapsed`]; storage errors.
    pub(crate) async fn confirm(&self) -> Result<()> {
        self.check.confirm().await
    }

    /// A handle that confirms this session, for the walk's index writes.
    pub(crate) fn confirmer(&self) -> Confirmer<S> {
        self.check.clone()
    }

    /// Stops the refreshes and deletes the session.
    ///
    /// # Errors
    /// Storage errors (the session then goes stale on its own).
    pub(crate) async fn close(self) -> Result<()> {
        self.refresher.abort();
        self.check
            .storage
            .delete(FileType::Session, &self.check.name)
            .await
    }
}

impl<S: Storage> Confirmer<S> {
    /// Refreshes the session now, and checks that it never went stale: no two refreshes
    /// were a timeout or more apart in storage time (a prune could then have seen it
    /// stale, one second of rounding included).
    ///
    /// # Errors
    /// [`RepoError::SessionLapsed`]; storage errors.
    pub(crate) async fn confirm(&self) -> Result<()> {
        let at = write(
            self.storage.as_ref(),
            &self.name,
            &self.body,
            &self.progress,
        )
        .await?;
        let mut refreshes = self.refreshes.lock().expect("not poisoned");
        refreshes.record(at);
        let timeout = i64::try_from(self.timeout.as_secs()).unwrap_or(i64::MAX);
        if refreshes.longest_gap >= timeout {
            return Err(RepoError::SessionLapsed {
                gap_secs: u64::try_from(refreshes.longest_gap).unwrap_or(0),
                timeout_secs: self.timeout.as_secs(),
            });
        }
        Ok(())
    }
}

/// The sessions present at storage time `now`: the start of each live one (`i64::MIN`
/// when its object does not say, or does not parse: it may have started before anything),
/// and the names of the stale ones. A session's timeout is the longer of `timeout` (the
/// repository's) and its own.
///
/// # Errors
/// Storage errors.
pub(crate) async fn sessions<S: Storage>(
    storage: &S,
    now: i64,
    timeout: Duration,
) -> Result<(Vec<i64>, Vec<String>)> {
    let (mut live, mut stale) = (Vec::new(), Vec::new());
    for (name, _) in storage.list(FileType::Session).await? {
        if name.starts_with("clock-") {
            continue;
        }
        let Some(modified) = storage.modified(FileType::Session, &name).await? else {
            continue; // closed since the listing
        };
        let json: Option<SessionJson> = match storage.get(FileType::Session, &name).await {
            Ok(bytes) => serde_json::from_slice(&bytes).ok(),
            Err(RepoError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        let own = json.as_ref().map_or(0, |j| j.timeout_secs);
        let timeout = i64::try_from(timeout.as_secs().max(own)).unwrap_or(i64::MAX);
        if now.saturating_sub(modified) > timeout {
            stale.push(name);
        } else {
            live.push(json.and_then(|j| j.started).unwrap_or(i64::MIN));
        }
    }
    Ok((live, stale))
}

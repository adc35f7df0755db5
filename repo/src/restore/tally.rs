//! What a restore onto a directory has written and what failed, kept for the walk
//! (`tree.rs`) and the writers of small files (`batch.rs`) at once; when a run of
//! failures means giving up; and how many queued files are not done yet.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::batch::Done;
use super::tree::{FAILURES_IN_A_ROW, RestoreSummary};
use crate::error::{RepoError, Result};
use crate::repository::Repository;
use crate::storage::{FileType, Storage};

/// One restore's counts and failures.
pub(super) struct Tally<'a, S: Storage> {
    repo: &'a Repository<S>,
    state: Mutex<State>,
    /// Set when the restore gives up: no further file is started.
    pub(super) stop: AtomicBool,
    /// Told whenever the last queued file is done, and when the restore gives up.
    drained: Notify,
}

#[derive(Default)]
struct State {
    summary: RestoreSummary,
    /// Files whose content failed: their further hard-link names cannot be made.
    failed_files: HashSet<PathBuf>,
    /// Entries failed since the last one restored.
    in_a_row: usize,
    /// How many of those, the last ones, were errors of the target itself.
    target_in_a_row: usize,
    /// Files queued and not done yet.
    queued: usize,
    /// Why the restore gave up, the first reason.
    gave_up: Option<RepoError>,
    /// A task that wrote files was lost (a panic), or a file that failed could not be
    /// removed: a file may have been left short.
    left_short: bool,
}

impl State {
    fn succeeded(&mut self) {
        self.in_a_row = 0;
        self.target_in_a_row = 0;
    }
}

impl<'a, S: Storage> Tally<'a, S> {
    pub(super) fn new(repo: &'a Repository<S>) -> Self {
        Self {
            repo,
            state: Mutex::default(),
            stop: AtomicBool::new(false),
            drained: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the summary.
    pub(super) fn summary(&self, change: impl FnOnce(&mut RestoreSummary)) {
        change(&mut self.state().summary);
    }

    /// The summary, once the restore is over; or why it gave up.
    pub(super) fn finish(self) -> Result<RestoreSummary> {
        let state = self
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        match state.gave_up {
            Some(e) => Err(e),
            None => Ok(state.summary),
        }
    }

    /// Gives up with `e`, unless it already did (the first reason stays): no further file
    /// is started.
    pub(super) fn give_up(&self, e: RepoError) {
        self.state().gave_up.get_or_insert(e);
        self.stop.store(true, Ordering::Relaxed);
        // The queue is not written to the end now: a walk waiting for it goes on to stop.
        self.drained.notify_waiters();
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether every entry was restored: none listed as failed (metadata aside), and the
    /// restore did not give up.
    pub(super) fn wrote_every_entry(&self) -> bool {
        let state = self.state();
        state.summary.failed.is_empty() && state.gave_up.is_none()
    }

    /// Whether a file may have been left short: a task that wrote files was lost, or a
    /// file that failed could not be removed.
    pub(super) fn left_short(&self) -> bool {
        self.state().left_short
    }

    /// Whether the file `path` failed.
    pub(super) fn file_has_failed(&self, path: &PathBuf) -> bool {
        self.state().failed_files.contains(path)
    }

    /// A file is queued for `batch.rs`.
    pub(super) fn queued(&self) {
        self.state().queued += 1;
    }

    /// Waits until every queued file is done, or the restore gave up.
    pub(super) async fn drained(&self) {
        loop {
            let told = self.drained.notified();
            let mut told = std::pin::pin!(told);
            told.as_mut().enable();
            if self.state().queued == 0 || self.stopped() {
                return;
            }
            told.await;
        }
    }

    /// A queued file is done: counted or listed, and its directory's metadata applied if
    /// it was the last the directory waited for.
    pub(super) async fn queued_done(&self, done: Done) {
        let Done {
            result,
            path,
            rel,
            dir,
        } = done;
        if matches!(
            result,
            Err(RepoError::Task { .. } | RepoError::LeftShort { .. })
        ) {
            self.state().left_short = true;
        }
        match result {
            Ok(n) => self.file_done(n, &rel),
            // In flight when the restore gave up: not another failure to ask about.
            Err(_) if self.stopped() => {}
            Err(e) => {
                if let Err(e) = self.file_failed(path, &rel, e).await {
                    self.give_up(e);
                }
            }
        }
        if let Some((node, rel)) = dir.file_done() {
            let failed = crate::fsmeta::apply_fd(dir.open.fd(), &node);
            self.meta_failed(failed, &rel);
        }
        let mut state = self.state();
        state.queued -= 1;
        if state.queued == 0 {
            self.drained.notify_waiters();
        }
    }

    /// Lists an entry that could not be restored. After [`FAILURES_IN_A_ROW`] in a row,
    /// gives up (returns `e`) if all of them were the target's own errors (a full or
    /// read-only file system fails every entry after it) or the storage no longer serves
    /// the repository's `config`, and otherwise counts a new run.
    pub(super) async fn failed(&self, rel: &str, e: RepoError) -> Result<()> {
        let ask = {
            let mut state = self.state();
            state.in_a_row += 1;
            if matches!(e, RepoError::Io { .. }) {
                state.target_in_a_row += 1;
            } else {
                state.target_in_a_row = 0;
            }
            if state.in_a_row >= FAILURES_IN_A_ROW && state.target_in_a_row >= state.in_a_row {
                return Err(e);
            }
            state.in_a_row >= FAILURES_IN_A_ROW
        };
        if ask {
            if self.repo.storage().get(FileType::Config, "").await.is_err() {
                return Err(e);
            }
            self.succeeded();
        }
        self.state().summary.failed.push(format!("{rel}: {e}"));
        Ok(())
    }

    /// A regular file that could not be restored (`new_file` removed what it wrote).
    pub(super) async fn file_failed(&self, path: PathBuf, rel: &str, e: RepoError) -> Result<()> {
        self.state().failed_files.insert(path);
        self.failed(rel, e).await
    }

    /// Ends a run of failures.
    pub(super) fn succeeded(&self) {
        self.state().succeeded();
    }

    /// A regular file written, with the metadata `new_file` could not apply.
    pub(super) fn file_done(&self, (bytes, meta_failed): (u64, Vec<String>), rel: &str) {
        {
            let mut state = self.state();
            state.succeeded();
            state.summary.bytes += bytes;
            state.summary.files += 1;
        }
        self.repo.progress.add_file();
        self.meta_failed(meta_failed, rel);
    }

    /// Lists metadata that could not be applied to `rel`.
    pub(super) fn meta_failed(&self, failed: Vec<String>, rel: &str) {
        if failed.is_empty() {
            return;
        }
        let mut state = self.state();
        for what in failed {
            state.summary.metadata_failed.push(format!("{rel}: {what}"));
        }
    }
}

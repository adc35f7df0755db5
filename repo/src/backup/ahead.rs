//! The parent snapshot's trees, read ahead of a backup's walk: a re-run of a tree of many
//! directories would otherwise wait on one round trip per directory. Trees that lie next
//! to each other in a pack come in one range GET (a directory's subdirectories usually do:
//! a backup stores each one's tree as its walk leaves it), so the gateway and the store
//! answer one request where they answered one per directory.

use std::collections::HashMap;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::Tree;

/// Runs of trees being read at once, at most. Memory: these runs, plus the trees of runs
/// that came in and that the walk has not reached yet (at most a run's worth per directory
/// level it is inside; `TREES_PER_RUN`).
pub(super) const RUNS_AHEAD: usize = 4;

/// A run being read: its task, and the trees of it still wanted.
struct Run {
    task: JoinHandle<Vec<Result<Tree>>>,
    ids: Vec<Id>,
    wanted: usize,
}

/// Trees read ahead, by ID: those that came in, and the runs still being read.
#[derive(Default)]
pub(super) struct Ahead {
    /// The run each tree being read belongs to.
    pending: HashMap<Id, u64>,
    runs: HashMap<u64, Run>,
    /// Trees that came in with a run (or the error of reading one) and the walk has not
    /// taken yet.
    arrived: HashMap<Id, Result<Tree>>,
    next_run: u64,
}

impl Ahead {
    /// Runs being read.
    pub(super) fn in_flight(&self) -> usize {
        self.runs.len()
    }

    /// Whether the tree `id` is being read or came in.
    pub(super) fn has(&self, id: &Id) -> bool {
        self.pending.contains_key(id) || self.arrived.contains_key(id)
    }

    /// Starts reading `ids`, one run of a pack (as [`Repository::run_of`] groups them),
    /// none of them [`Ahead::has`] already.
    pub(super) fn start<S: Storage>(
        &mut self,
        repo: &Repository<S>,
        handle: &Handle,
        ids: Vec<Id>,
    ) {
        let run = self.next_run;
        self.next_run += 1;
        for id in &ids {
            self.pending.insert(*id, run);
        }
        let repo = repo.clone();
        let read = ids.clone();
        let task = handle.spawn(async move { repo.read_trees(&read).await });
        let wanted = ids.len();
        self.runs.insert(run, Run { task, ids, wanted });
    }

    /// The tree `id` if it was read ahead (waiting for its run), `None` if it was not.
    pub(super) fn take(&mut self, handle: &Handle, id: &Id) -> Option<Result<Tree>> {
        if let Some(tree) = self.arrived.remove(id) {
            return Some(tree);
        }
        let number = self.pending.remove(id)?;
        let run = self.runs.remove(&number)?;
        let still: Vec<Id> = run
            .ids
            .iter()
            .filter(|i| self.pending.get(i) == Some(&number))
            .copied()
            .collect();
        for i in &still {
            self.pending.remove(i);
        }
        let trees = match handle.block_on(run.task) {
            Ok(trees) => trees,
            Err(e) => return Some(Err(RepoError::task("tree read-ahead", &e))),
        };
        let mut found = None;
        for (i, tree) in run.ids.iter().zip(trees) {
            if i == id && found.is_none() {
                found = Some(tree);
            } else if still.contains(i) {
                self.arrived.insert(*i, tree);
            }
        }
        found
    }

    /// Drops the trees `ids` (subdirectories gone since the parent), read or being read;
    /// a run none of whose trees is wanted any more is cancelled.
    pub(super) fn forget(&mut self, ids: &[Id]) {
        for id in ids {
            self.arrived.remove(id);
            let Some(number) = self.pending.remove(id) else {
                continue;
            };
            if let Some(run) = self.runs.get_mut(&number) {
                run.wanted -= 1;
                if run.wanted == 0 {
                    run.task.abort();
                    self.runs.remove(&number);
                }
            }
        }
    }
}

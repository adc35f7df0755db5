//! A directory's subdirectories' trees, read ahead of a walk that comes to them in order:
//! the restore's walk of a snapshot and the backup's walk beside its parent snapshot. A
//! tree of many directories would otherwise wait on one round trip per directory. Trees
//! that lie next to each other in a pack (a directory's subdirectories usually do: a
//! backup stores each one's tree as its walk leaves it) come in runs, one range GET each
//! ([`Repository::read_trees`]), a few runs ahead of the walk.

use std::collections::VecDeque;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::{Repository, TREE_RUN_SPAN, TREES_PER_RUN};
use crate::storage::Storage;
use crate::task::Task;
use crate::tree::Tree;

/// Runs being read at once, at most. Memory: these runs, and the rest of the run the walk
/// is in, per directory level the walk is inside.
pub(crate) const RUNS_AHEAD: usize = 4;

/// What comes for the next positions, in order.
enum Group {
    /// A position without a tree ID (a directory restored empty).
    Absent,
    /// A run being read, for this many positions (as many as it has trees); dropped
    /// unread when none of them is wanted.
    Run(Task<Vec<Result<Tree>>>, usize),
}

impl Group {
    fn len(&self) -> usize {
        match self {
            Group::Absent => 1,
            Group::Run(_, n) => *n,
        }
    }
}

/// The trees of one directory's subdirectories, by position in the order the walk comes
/// to them, read ahead in runs.
pub(crate) struct TreesAhead<S: Storage> {
    repo: Repository<S>,
    ids: Vec<Option<Id>>,
    /// The first position not yet started.
    next: usize,
    /// Groups started, each with its first position.
    groups: VecDeque<(usize, Group)>,
    /// The trees of the run the walk is in, from position `ready_at` on.
    ready: VecDeque<Option<Result<Tree>>>,
    ready_at: usize,
}

impl<S: Storage> TreesAhead<S> {
    /// Starts reading the trees `ids` (one per position, `None` for one without).
    pub(crate) fn new(repo: &Repository<S>, ids: Vec<Option<Id>>) -> Self {
        let mut ahead = Self {
            repo: repo.clone(),
            ids,
            next: 0,
            groups: VecDeque::new(),
            ready: VecDeque::new(),
            ready_at: 0,
        };
        ahead.start();
        ahead
    }

    fn start(&mut self) {
        while self.groups.len() < RUNS_AHEAD && self.next < self.ids.len() {
            let rest = &self.ids[self.next..];
            let n = self
                .repo
                .run_of(
                    rest.iter().map_while(Option::as_ref).take(TREES_PER_RUN),
                    TREE_RUN_SPAN,
                )
                .max(1);
            let group = if rest[0].is_none() {
                Group::Absent
            } else {
                let ids: Vec<Id> = rest[..n].iter().flatten().copied().collect();
                let repo = self.repo.clone();
                Group::Run(
                    Task(tokio::spawn(async move { repo.read_trees(&ids).await })),
                    n,
                )
            };
            self.groups.push_back((self.next, group));
            self.next += n;
        }
    }

    /// The tree at position `at`: `None` for a position without a tree ID, or one the walk
    /// has passed already (the caller reads that tree alone). Positions before `at` that
    /// were not asked for are dropped, their runs unread where none of them is wanted.
    pub(crate) async fn tree_at(&mut self, at: usize) -> Option<Result<Tree>> {
        self.drop_ready_before(at);
        if self.ready.is_empty() {
            while self
                .groups
                .front()
                .is_some_and(|(first, g)| first + g.len() <= at)
            {
                self.groups.pop_front();
            }
            if self.groups.is_empty() {
                self.next = self.next.max(at);
            }
            self.start();
            let (first, group) = self.groups.pop_front()?;
            if first > at {
                self.groups.push_front((first, group));
                return None;
            }
            self.ready_at = first;
            self.ready = Self::answers(group).await;
            self.drop_ready_before(at);
        }
        if self.ready_at != at {
            return None;
        }
        let tree = self.ready.pop_front()?;
        self.ready_at += 1;
        self.start();
        tree
    }

    /// Drops the trees read for positions before `at`, which the walk has passed.
    fn drop_ready_before(&mut self, at: usize) {
        while self.ready_at < at && self.ready.pop_front().is_some() {
            self.ready_at += 1;
        }
    }

    /// One answer for each of the group's positions, whatever happened, so that the next
    /// positions get their own trees.
    async fn answers(group: Group) -> VecDeque<Option<Result<Tree>>> {
        let Group::Run(mut task, n) = group else {
            return VecDeque::from([None]);
        };
        match (&mut task.0).await {
            Ok(trees) if trees.len() == n => trees.into_iter().map(Some).collect(),
            Ok(_) => (0..n)
                .map(|_| {
                    Some(Err(RepoError::Invalid(
                        "a run of trees came back short".into(),
                    )))
                })
                .collect(),
            Err(e) => (0..n)
                .map(|_| Some(Err(RepoError::task("tree read-ahead", &e))))
                .collect(),
        }
    }
}

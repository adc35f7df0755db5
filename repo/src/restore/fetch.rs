//! Fetching a file's content: planned as runs of chunks that lie next to each other in a
//! pack (one range GET each), fetched a few runs ahead of the writer; and a directory's
//! subdirectories' trees, in runs the same way, ahead of the walk.

use bytes::Bytes;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::{Repository, TREE_RUN_SPAN, TREES_PER_RUN};
use crate::storage::Storage;
use crate::tree::{Content, Node, Tree};

/// Range GETs in flight while a file is restored: reads go through the gateway, so
/// overlapping them hides the round trips.
pub const FETCH_AHEAD: usize = 4;

/// Chunks that lie next to each other in a pack (a file's chunks usually do) are read with
/// one range GET of up to this many bytes: fewer requests for the gateway and the store.
/// Memory: `FETCH_AHEAD` times this, at most.
pub const FETCH_SPAN: u64 = 8 << 20;

/// A spawned task that is cancelled when dropped (a failed restore stops its fetches).
pub(super) struct Task<T>(pub(super) tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs of subdirectory trees read ahead of the restore's walk, at most: a tree of many
/// small directories would otherwise wait on one round trip per directory before its
/// files start. Each run is trees that lie next to each other in a pack, read with one
/// range GET ([`Repository::read_trees`]; at most `TREES_PER_RUN` of them).
pub const TREE_RUNS_AHEAD: usize = 4;

/// What [`TreesAhead`] holds for the next subdirectories, in order.
enum Group {
    /// A directory without a tree ID (the walk restores it empty).
    Absent,
    /// A run being read, for this many subdirectories (as many as it has trees).
    Run(Task<Vec<Result<Tree>>>, usize),
}

/// The trees of a directory's subdirectories, in the order the walk comes to them, read
/// ahead in runs.
pub(super) struct TreesAhead<S: Storage> {
    repo: Repository<S>,
    ids: Vec<Option<Id>>,
    next: usize,
    groups: std::collections::VecDeque<Group>,
    /// The rest of the run the walk is in.
    ready: std::collections::VecDeque<Result<Tree>>,
}

impl<S: Storage> TreesAhead<S> {
    /// Starts reading the trees `ids` (one per subdirectory, `None` for one without).
    pub(super) fn new(repo: &Repository<S>, ids: Vec<Option<Id>>) -> Self {
        let mut ahead = Self {
            repo: repo.clone(),
            ids,
            next: 0,
            groups: std::collections::VecDeque::new(),
            ready: std::collections::VecDeque::new(),
        };
        ahead.start();
        ahead
    }

    fn start(&mut self) {
        while self.groups.len() < TREE_RUNS_AHEAD && self.next < self.ids.len() {
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
            self.next += n;
            self.groups.push_back(group);
        }
    }

    /// The next subdirectory's tree (`None` for one without a tree ID).
    pub(super) async fn next_tree(&mut self) -> Option<Result<Tree>> {
        if let Some(tree) = self.ready.pop_front() {
            return Some(tree);
        }
        let group = self.groups.pop_front();
        self.start();
        match group? {
            Group::Absent => None,
            Group::Run(mut task, n) => {
                // One answer for each of the run's subdirectories, whatever happened, so
                // that the next ones get their own trees.
                self.ready = match (&mut task.0).await {
                    Ok(trees) if trees.len() == n => trees.into(),
                    Ok(_) => (0..n)
                        .map(|_| Err(RepoError::Invalid("a run of trees came back short".into())))
                        .collect(),
                    Err(e) => (0..n)
                        .map(|_| Err(RepoError::task("tree task", &e)))
                        .collect(),
                };
                self.ready.pop_front()
            }
        }
    }
}

/// A file's content in order: `(0, Some(bytes))` for a chunk, `(n, None)` for `n` zeros.
/// Runs of chunks are fetched by [`Repository::read_run`], up to `FETCH_AHEAD` at a time,
/// each a task of its own so that responses keep streaming in while the caller writes.
pub(super) fn fetch_ahead<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
) -> impl futures::Stream<Item = Result<(u64, Option<Bytes>)>> + 'static {
    use futures::StreamExt as _;
    let repo = repo.clone();
    let mut pieces = Vec::new();
    let content = node.content.as_deref().unwrap_or_default();
    let mut i = 0;
    while i < content.len() {
        match &content[i] {
            Content::Zero { zero } => {
                pieces.push(Err(*zero));
                i += 1;
            }
            Content::Blob { .. } => {
                let blobs = || {
                    content[i..].iter().map_while(|c| match c {
                        Content::Blob { blob } => Some(blob),
                        Content::Zero { .. } => None,
                    })
                };
                // Walked only as far as the run goes: a file's plan stays linear in its
                // chunks.
                let n = repo.run_of(blobs(), FETCH_SPAN).max(1);
                pieces.push(Ok(blobs().take(n).copied().collect::<Vec<Id>>()));
                i += n;
            }
        }
    }
    futures::stream::iter(pieces)
        .map(move |piece| {
            let fetch = piece.map(|ids| {
                let repo = repo.clone();
                Task(tokio::spawn(async move { repo.read_run(&ids).await }))
            });
            async move {
                match fetch {
                    Ok(mut task) => match (&mut task.0).await {
                        Ok(run) => run.map(|blobs| {
                            blobs
                                .into_iter()
                                .map(|b| Ok((0, Some(b))))
                                .collect::<Vec<_>>()
                        }),
                        Err(e) => Err(RepoError::task("fetch task", &e)),
                    },
                    Err(zero) => Ok(vec![Ok((zero, None))]),
                }
            }
        })
        .buffered(FETCH_AHEAD)
        .flat_map(|run| {
            futures::stream::iter(match run {
                Ok(items) => items,
                Err(e) => vec![Err(e)],
            })
        })
}

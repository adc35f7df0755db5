//! Fetching a file's content: planned as runs of chunks that lie next to each other in a
//! pack (one range GET each), fetched a few runs ahead of the writer.

use bytes::Bytes;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::storage::Storage;
use crate::task::Task;
use crate::tree::{Content, Node};

/// Range GETs in flight while a file is restored: reads go through the gateway, so
/// overlapping them hides the round trips.
pub const FETCH_AHEAD: usize = 4;

/// Chunks that lie next to each other in a pack (a file's chunks usually do) are read with
/// one range GET of up to this many bytes: fewer requests for the gateway and the store.
/// Memory: `FETCH_AHEAD` times this, at most.
pub const FETCH_SPAN: u64 = 8 << 20;

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

//! `kura restore`: a snapshot's tree back onto a directory, one file onto a path, or one
//! file to a writer. The entry points are here; the parts depend one way only:
//!
//! - `tree.rs`: walks a snapshot's trees onto a directory (selection, hard links, special
//!   files, metadata, failures and when to give up);
//! - `batch.rs`: the small files of a whole restore, queued by the walk, written
//!   together while it goes on, their blobs read pack by pack in runs (one range GET for
//!   many files, of many directories);
//! - `tally.rs`: what a restore wrote and what failed, for the walk and `batch.rs` at
//!   once, and when to give up;
//! - `unfinished.rs`: the marker at the target's top while a restore runs, under which
//!   small files are written under their own names directly;
//! - `changed.rs`: an image onto a target that holds an older one, only the blocks that
//!   differ;
//! - `write.rs`: writes one file's content (sparse, or zeros onto a device);
//! - `direct.rs`: large files through direct I/O;
//! - `target.rs`: opening a one-file snapshot's target (a block device exclusively, and
//!   only when it is large enough);
//! - `fetch.rs`: plans a file's content into runs of chunks and fetches them ahead.
//!
//! Blobs are fetched by range GET through the gateway (FORMAT.md section 6) and checked
//! against their IDs; holes (`zero` entries) are skipped, so restored files are sparse
//! where the source was zero.

mod batch;
mod changed;
mod direct;
mod fetch;
mod tally;
mod target;
mod tree;
mod unfinished;
mod write;

use std::io::Write;
use std::path::Path;

use futures::StreamExt as _;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::include::Include;
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::Node;

pub use changed::{ChangedRestore, restore_changed_to};
pub use target::FileTarget;
use target::one_file;
pub use tree::{FAILURES_IN_A_ROW, RestoreSummary};
pub use unfinished::UNFINISHED;

/// Restores the tree `root` under `target` (created if missing): the entries `include`
/// selects, with the directories leading to them. An entry that fails is listed in
/// [`RestoreSummary::failed`] and the restore goes on with the next.
///
/// # Errors
/// The root tree cannot be read or `target` created, or [`FAILURES_IN_A_ROW`] entries
/// failed one after another and the storage no longer serves the repository's `config`
/// (the last entry's error).
pub async fn restore<S: Storage>(
    repo: &Repository<S>,
    root: &Id,
    target: &Path,
    include: &Include,
) -> Result<RestoreSummary> {
    std::fs::create_dir_all(target).map_err(|e| RepoError::io(target, e))?;
    let tree = repo.read_tree(root).await?;
    tree::restore_tree(repo, include, root, tree, target).await
}

/// Writes the content of a file node to `out` (for `kura restore SNAP -`).
///
/// # Errors
/// [`RepoError::Invalid`] for a node that is not a regular file; storage and
/// verification errors, or when `out` fails.
pub async fn write_content<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    out: &mut impl Write,
) -> Result<u64> {
    one_file(node)?;
    let mut written = 0u64;
    let mut fetched = fetch::fetch_ahead(repo, node);
    while let Some(item) = fetched.next().await {
        match item? {
            (_, Some(data)) => {
                out.write_all(&data)
                    .map_err(|e| RepoError::io(Path::new("-"), e))?;
                written += data.len() as u64;
            }
            (zero, None) => {
                write::write_zeros(out, zero).map_err(|e| RepoError::io(Path::new("-"), e))?;
                written += zero;
            }
        }
    }
    Ok(written)
}

/// Restores a single file node onto `path`: a block device (opened exclusively, at
/// least the file's size, written in place, zeros included) or a regular file (created
/// or replaced, sparse). For `kura restore SNAP /dev/...` and `kura restore SNAP
/// image.raw` of a one-file snapshot.
///
/// # Errors
/// [`RepoError::Invalid`] for a node that is not a regular file (before `path` is
/// touched); as [`FileTarget::open`]; storage and verification errors; write errors.
pub async fn restore_file<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    path: &Path,
) -> Result<u64> {
    one_file(node)?;
    let target = FileTarget::open(path, node)?;
    restore_file_to(repo, node, target).await
}

/// Restores a single file node onto a target opened with [`FileTarget::open`] (so that
/// the caller can say what it overwrites first).
///
/// # Errors
/// [`RepoError::Invalid`] for a node that is not a regular file; storage and
/// verification errors; write errors.
pub async fn restore_file_to<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    target: FileTarget,
) -> Result<u64> {
    one_file(node)?;
    let holes = if target.device_size().is_some() {
        write::Holes::WriteZeros {
            discard: write::thin_block(&target.file),
        }
    } else {
        write::Holes::Skip
    };
    repo.progress.set_total(node.size.unwrap_or(0));
    let path = target.path();
    let n = write::write_file(repo, node, &target.file, path, holes).await?;
    target.finish()?;
    Ok(n)
}

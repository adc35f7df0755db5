//! `kura backup`: read, chunk, hash, look up, compress, pack, upload; then trees, index,
//! snapshot, in the order FORMAT.md section 7 requires. A pipeline of parts with one job
//! each, depending one way only:
//!
//! - `walk.rs`: the sources and directory trees, each entry's metadata and xattrs;
//! - `command.rs`: the command whose output a `Source::Command` stores, and its exit;
//! - `meta.rs`: an entry's metadata from one `statx` by its name in its open directory;
//! - `read.rs`: opening a listed file safely (the file listed, not what replaced it);
//! - `block.rs`: a device or image in fixed blocks, only those that can hold something
//!   new (holes, `--allocated`, `--changed`), read ahead of the hashing;
//! - `chunk.rs`: content-defined chunks, and every chunk hashed and compressed on every core;
//! - `packer.rs`: new blobs into packs, pack uploads, index objects.
//!
//! Reading and chunking run on a blocking-pool thread; packs upload on the runtime, at
//! most `UPLOADS_IN_FLIGHT` at once, so memory is bounded by
//! `(UPLOADS_IN_FLIGHT + 2) * pack_size` (one pack filling per blob type) plus the
//! chunker's window (four times the largest chunk) and its batch of compressed chunks,
//! whatever the data. Chunks are hashed and compressed on every core in batches
//! (`par_map`).

mod block;
mod chunk;
mod command;
mod meta;
mod packer;
mod read;
mod walk;

use std::sync::Arc;

use bytes::Bytes;
use tokio::runtime::Handle;

use crate::config::now_rfc3339;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::session::{Confirmer, Session};
use crate::snapshot::Snapshot;
use crate::storage::{FileType, Storage};
use packer::Packer;
use walk::{Parent, Walker};

pub use block::{BlockMap, BlockOptions};
pub use walk::Source;

/// Snapshot labels.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Host name.
    pub host: String,
    /// Tags.
    pub tags: Vec<String>,
    /// Parent snapshot: files whose size, mtime, ctime and inode match its record are not
    /// read again, unless they changed within 2 s of its start or while it read them
    /// (FORMAT.md section 9).
    pub parent: Option<Id>,
    /// The longest time between index objects while packs are stored (`None`:
    /// [`crate::INDEX_INTERVAL`]); what a backup stored before its last index object is
    /// reused by the next run if this one fails.
    pub index_interval: Option<std::time::Duration>,
    /// For `Source::Block`: which blocks to read.
    pub block: BlockOptions,
}

/// Runs a backup and writes its snapshot, within a session (FORMAT.md section 9.2).
///
/// # Panics
/// Outside a tokio runtime.
///
/// # Errors
/// Storage errors end the backup (nothing after the last written index is referenced);
/// unreadable files do not: they are listed in the snapshot, which is then `incomplete`.
/// Nor do files that changed while they were read, twice: stored as read, they are
/// flagged and listed (`changed_during_backup`), and the snapshot is complete.
/// `SessionLapsed` when the session went stale (the process was paused, or cut off from
/// the storage, past the session timeout): no snapshot is kept, nor an index object
/// written after the lapse.
pub async fn backup<S: Storage>(
    repo: &mut Repository<S>,
    source: Source,
    opts: Options,
) -> Result<(Id, Snapshot)> {
    // The session first: a prune keeps every mark written after it started, and the marks
    // this backup reads next are all written before that or seen by it.
    let session = Session::open(
        &repo.storage,
        repo.config.params.session_timeout,
        &repo.progress,
    )
    .await?;
    let result = match in_session(repo, source, opts, session.confirmer()).await {
        Ok(snap) => write_snapshot(repo, &session, snap).await,
        Err(e) => Err(e),
    };
    // A session left behind only goes stale; the backup's own outcome matters more.
    let closed = session.close().await;
    let written = result?;
    closed?;
    Ok(written)
}

/// Stores the snapshot, if the session never lapsed before or while it was written: a
/// prune may have deleted what it uses otherwise (the snapshot is then deleted again).
async fn write_snapshot<S: Storage>(
    repo: &Repository<S>,
    session: &Session<S>,
    snap: Snapshot,
) -> Result<(Id, Snapshot)> {
    session.confirm().await?;
    let bytes = serde_json::to_vec_pretty(&snap).expect("snapshot serializes");
    let id = repo.config.id_key.id(&bytes);
    repo.storage
        .put(FileType::Snapshot, &id.to_hex(), Bytes::from(bytes))
        .await?;
    // Paused between the check above and the write: the snapshot may name deleted packs.
    if let Err(e) = session.confirm().await {
        // Best effort: if this fails too, `check` names the snapshot.
        let _ = repo.storage.delete(FileType::Snapshot, &id.to_hex()).await;
        return Err(e);
    }
    Ok((id, snap))
}

/// The backup up to its snapshot: the source's blobs and trees stored and indexed.
async fn in_session<S: Storage>(
    repo: &mut Repository<S>,
    source: Source,
    opts: Options,
    session: Confirmer<S>,
) -> Result<Snapshot> {
    let handle = Handle::current();
    // Marks first, then the index: a prune that deletes a marked pack rewrites the index
    // before it deletes the mark, so a mark gone by now means an index read now no longer
    // lists its packs. The index the repository was opened with may be older than that.
    let marked = crate::marks::marked_packs(repo).await?;
    repo.refresh_index().await?;
    let parent = match &opts.parent {
        Some(id) => Some(repo.load_snapshot(id).await?),
        None => None,
    };
    // The walk is synchronous (file reads) and runs on a blocking-pool thread of its own;
    // it drives uploads with `Handle::block_on`, which must not nest inside the caller's
    // own `block_on` (a wake-up of the caller's future would be lost).
    let writer_repo = repo.clone();
    let interval = opts.index_interval.unwrap_or(crate::index::INDEX_INTERVAL);
    let abandon = Abandon::default();
    let abandoned = Arc::clone(&abandon.0);
    let (result, written, names) = tokio::task::spawn_blocking(move || {
        let mut w = match Packer::new(writer_repo, handle, marked, (interval, abandoned, session))
            .and_then(Walker::new)
        {
            Ok(w) => w,
            Err(e) => return (Err(e), Vec::new(), Vec::new()),
        };
        let result = run(&mut w, source, opts, parent);
        let (written, names) = w.packer.into_written();
        (result, written, names)
    })
    .await
    .map_err(|e| RepoError::task("backup thread", &e))?;
    // The packs of every index object this backup stored are in storage (also when it
    // failed later); let this handle see them too. Added here, after the writer's buffers
    // are gone, rather than during the run: the index would grow (and rehash) while the
    // packs are in memory, and raise the peak (measured: 87 -> 100 MiB on 200,000 files).
    // With the objects' names (recorded first, so that they are there even if adding
    // fails), so that the next backup on this handle reloads the index when a prune has
    // deleted one of them.
    repo.index_loaded_from(names);
    let index = Arc::make_mut(&mut repo.index);
    for pack in &written {
        index.add_pack(pack, "this backup")?;
    }
    result
}

/// Set when dropped: held by the backup's future while its walk runs on a blocking thread,
/// which a dropped future does not stop, so that the walk stops too (the packer asks
/// before each batch of chunks and each tree) instead of reading the whole source for no
/// one.
#[derive(Default)]
struct Abandon(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The whole backup but the snapshot's write: the source, the last packs and index.
fn run<S: Storage>(
    w: &mut Walker<S>,
    source: Source,
    opts: Options,
    parent: Option<Snapshot>,
) -> Result<Snapshot> {
    // Before the first file is listed: the next backup trusts no file changed since
    // (FORMAT.md section 9).
    let started = now_rfc3339();
    let parent = match parent {
        Some(snap) => Some(Parent {
            root: w
                .packer
                .handle()
                .block_on(w.packer.repo().read_tree(&snap.tree))?,
            started: snap.instant(),
            xattrs_recorded: snap.xattrs_recorded,
            // An image flagged as written to while it was read may be torn: a `--changed`
            // run would keep its blocks wherever the extents say nothing changed.
            whole: !snap.incomplete
                && snap.errors.is_empty()
                && snap.changed_during_backup.is_empty(),
            block: snap.block,
        }),
        None => None,
    };
    let (root, paths) = w.source(source, parent.as_ref(), &opts.block)?;
    let (paths, paths_hex) = Snapshot::record_paths(&paths);
    w.packer.finish()?;
    let snap = Snapshot {
        time: started,
        host: opts.host,
        tags: opts.tags,
        paths,
        paths_hex,
        tree: root,
        parent: opts.parent,
        incomplete: w.incomplete(),
        xattrs_recorded: w.xattrs_recorded(),
        errors: w.take_errors(),
        changed_during_backup: w.take_changed(),
        summary: w.take_summary(),
        block: w.block.take(),
        program: format!("kura {}", env!("CARGO_PKG_VERSION")),
    };
    Ok(snap)
}

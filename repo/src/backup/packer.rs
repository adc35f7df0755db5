//! The packer: every blob a backup stores goes through it. It decides whether a blob is
//! new (not in the index in a pack a prune has marked, not stored by this backup), keeps
//! one pack filling per blob type, uploads full packs on the runtime (at most
//! `UPLOADS_IN_FLIGHT` at once, their buffers reused for the next packs), and writes an
//! index object every `INDEX_EVERY` packs or `INDEX_INTERVAL` (FORMAT.md section 7), so that a backup that
//! stops leaves what it uploaded indexed up to its last index object. It never writes a
//! pack under a name a prune has marked.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::blob::{self, BlobType, Compression};
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::index::{INDEX_BLOBS, INDEX_EVERY, IndexJson, PackJson};
use crate::pack::{Entry, PackWriter};
use crate::repository::Repository;
use crate::session::Confirmer;
use crate::storage::{FileType, Storage};
use crate::tree::Tree;

/// A finished pack: its ID, bytes and header entries.
type PackParts = (Id, Vec<u8>, Vec<Entry>);

/// Packs uploading at once.
pub const UPLOADS_IN_FLIGHT: usize = 4;

/// A data pack buffer's capacity: the pack size, one largest blob past it, and the header;
/// allocated once, so that it never grows (and copies) by doubling.
fn pack_capacity(p: &crate::config::Params) -> usize {
    (p.pack_size as usize) + (p.chunker.max.max(p.block_size) as usize) + (64 << 10)
}

/// Pack buffers handed back by finished uploads. A fresh pack-sized allocation is mapped
/// afresh and faults in (and the kernel zeroes) every page as the pack fills: 15-20% of
/// the client's CPU in a profile of a first backup without this pool. Buffers are kept
/// rather than freed, up to the most that can be in use at once (one filling, the rest
/// uploading), so the pool never holds more than the backup needed at its busiest; freeing
/// them instead made glibc raise its mmap and trim thresholds and keep the memory anyway
/// (measured: 20-30 MB more peak RSS on a tree of 200,000 small files).
const BUFFERS_KEPT: usize = UPLOADS_IN_FLIGHT + 1;

#[derive(Clone, Default)]
struct Buffers(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

impl Buffers {
    fn take(&self, capacity: usize) -> Vec<u8> {
        let reused = self.0.lock().ok().and_then(|mut free| free.pop());
        reused.unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Keeps `bytes`'s buffer when the upload has dropped every other reference to it.
    fn give_back(&self, bytes: Bytes) {
        if let Ok(buf) = bytes.try_into_mut()
            && let Ok(mut free) = self.0.lock()
            && free.len() < BUFFERS_KEPT
        {
            free.push(Vec::from(buf));
        }
    }
}

/// What the packer stored, for the snapshot's summary and the progress counters.
#[derive(Clone, Copy, Default)]
pub(super) struct Added {
    /// New blobs.
    pub(super) blobs: u64,
    /// Their bytes before compression.
    pub(super) bytes: u64,
    /// Bytes uploaded in packs (after compression).
    pub(super) stored: u64,
}

/// Blobs into packs, packs into storage, index objects over them.
pub(super) struct Packer<S: Storage> {
    repo: Repository<S>,
    /// Blobs this backup stored (the handle's index covers the rest), so that a blob is
    /// stored once.
    added: HashSet<Id>,
    /// Packs that a prune has marked as unused (`marks.rs`): a later prune may delete them
    /// while this backup runs, so it neither reuses their blobs nor keeps a parent's
    /// content that lies in them.
    marked: HashSet<Id>,
    /// One pack being filled per blob type: trees are kept apart from data so that a
    /// damaged data pack never hides which files it held.
    packs: [PackWriter; 2],
    uploads: JoinSet<Result<()>>,
    permits: Arc<Semaphore>,
    /// Buffers of uploaded packs, for the next packs.
    buffers: Buffers,
    unindexed: Vec<PackJson>,
    /// The packs of the index objects stored so far, for the caller's handle.
    written: Vec<PackJson>,
    /// The names of those index objects.
    written_names: Vec<String>,
    handle: Handle,
    /// The zstd contexts of blobs stored one by one (trees, chunks of small files).
    zstd: blob::Compressors,
    counts: Added,
    /// When the last index object was written (or the packer started).
    last_index: Instant,
    /// The longest time between index objects while packs are stored.
    index_interval: Duration,
    /// Set once the backup's caller stopped waiting for it (`backup::Abandon`).
    abandoned: Arc<AtomicBool>,
    /// The backup's session, confirmed around each index object.
    session: Confirmer<S>,
}

impl<S: Storage> Packer<S> {
    /// A packer storing into `repo`'s storage, driving uploads on `handle`, relying on no
    /// blob of the `marked` packs, until `abandoned` is set, and indexing only while
    /// `session` holds.
    pub(super) fn new(
        repo: Repository<S>,
        handle: Handle,
        marked: HashSet<Id>,
        (index_interval, abandoned, session): (Duration, Arc<AtomicBool>, Confirmer<S>),
    ) -> Result<Self> {
        let first_pack = Vec::with_capacity(pack_capacity(&repo.config.params));
        Ok(Self {
            repo,
            added: HashSet::new(),
            marked,
            packs: [PackWriter::with_buffer(first_pack), PackWriter::default()],
            buffers: Buffers::default(),
            uploads: JoinSet::new(),
            permits: Arc::new(Semaphore::new(UPLOADS_IN_FLIGHT)),
            unindexed: Vec::new(),
            written: Vec::new(),
            written_names: Vec::new(),
            handle,
            zstd: blob::Compressors::new()?,
            counts: Added::default(),
            last_index: Instant::now(),
            index_interval,
            abandoned,
            session,
        })
    }

    /// The repository stored into.
    pub(super) fn repo(&self) -> &Repository<S> {
        &self.repo
    }

    /// The runtime that uploads run on.
    pub(super) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// What was stored so far.
    pub(super) fn added(&self) -> Added {
        self.counts
    }

    /// The packs of the index objects written, and those objects' names, for the caller's
    /// handle.
    pub(super) fn into_written(self) -> (Vec<PackJson>, Vec<String>) {
        (self.written, self.written_names)
    }

    /// Whether this backup may refer to `blob` without storing it: in a pack it may rely
    /// on, or stored by this backup.
    pub(super) fn has(&self, blob: &Id) -> bool {
        self.stored(blob) || self.added.contains(blob)
    }

    /// [`RepoError::Abandoned`] once the backup's caller stopped waiting for it: asked
    /// before each batch of chunks and each tree, so that the walk stops within one.
    pub(super) fn still_wanted(&self) -> Result<()> {
        if self.abandoned.load(Ordering::Relaxed) {
            return Err(RepoError::Abandoned);
        }
        Ok(())
    }

    /// Stores a tree blob.
    pub(super) fn save_tree(&mut self, tree: &Tree) -> Result<Id> {
        self.still_wanted()?;
        let json = serde_json::to_vec(tree).expect("tree serializes");
        tree_fits(json.len())?;
        self.save_blob(BlobType::Tree, &json)
    }

    /// Stores a blob unless the repository or this backup has it already.
    pub(super) fn save_blob(&mut self, kind: BlobType, raw: &[u8]) -> Result<Id> {
        let id = self.repo.config.id_key.id(raw);
        if !self.is_new(&id) {
            return Ok(id);
        }
        let compressed = self.zstd.compress(kind, raw);
        self.add_stored(kind, id, raw, compressed)?;
        Ok(id)
    }

    /// Whether a blob must be stored (and, if so, it now counts as added).
    pub(super) fn is_new(&mut self, id: &Id) -> bool {
        !self.stored(id) && self.added.insert(*id)
    }

    /// Whether the index holds a blob in a pack this backup may rely on (one no prune has
    /// marked: the index keeps one location per blob, so a blob also in an unmarked pack
    /// may be stored once more, never lost).
    fn stored(&self, id: &Id) -> bool {
        self.repo
            .index
            .get(id)
            .is_some_and(|l| !self.marked.contains(&l.pack))
    }

    /// Appends a blob's stored form to the open pack of its type.
    pub(super) fn add_stored(
        &mut self,
        kind: BlobType,
        id: Id,
        raw: &[u8],
        (compression, compressed): (blob::Compression, Option<Vec<u8>>),
    ) -> Result<()> {
        let stored = compressed.as_deref().unwrap_or(raw);
        let raw_len = u32::try_from(raw.len()).expect("chunks are under 4 GiB");
        self.packs[kind as usize].add(kind, id, compression, stored, raw_len);
        self.counts.blobs += 1;
        self.counts.bytes += raw.len() as u64;
        if self.packs[kind as usize].len() >= self.repo.config.params.pack_size as usize {
            self.flush_pack(kind)?;
        }
        Ok(())
    }

    /// Closes the current pack and starts its upload; writes an index every
    /// `INDEX_EVERY` packs.
    fn flush_pack(&mut self, kind: BlobType) -> Result<()> {
        if self.packs[kind as usize].is_empty() {
            return Ok(());
        }
        // Only data packs reuse buffers: a tree pack fills slowly, and a reused buffer
        // would sit resident, mostly unused, for the whole backup.
        let next = match kind {
            BlobType::Data => {
                PackWriter::with_buffer(self.buffers.take(pack_capacity(&self.repo.config.params)))
            }
            BlobType::Tree => PackWriter::default(),
        };
        let (id, bytes, entries) = std::mem::replace(&mut self.packs[kind as usize], next)
            .finish(&self.repo.config.id_key);
        let (id, bytes, entries) = self.unmarked_name(id, bytes, entries);
        self.counts.stored += bytes.len() as u64;
        self.unindexed.push(PackJson::new(id, &entries));
        let permit = self
            .handle
            .block_on(self.permits.clone().acquire_owned())
            .expect("the semaphore is never closed");
        let storage = self.repo.storage.clone();
        let buffers = self.buffers.clone();
        self.uploads.spawn_on(
            async move {
                let bytes = Bytes::from(bytes);
                let r = storage
                    .put(FileType::Pack, &id.to_hex(), bytes.clone())
                    .await;
                if kind == BlobType::Data {
                    buffers.give_back(bytes);
                }
                drop(permit);
                r
            },
            &self.handle,
        );
        // Surface upload errors early rather than at the end.
        while let Some(done) = self.uploads.try_join_next() {
            done.map_err(|e| RepoError::task("upload task", &e))??;
        }
        let blobs: usize = self.unindexed.iter().map(|p| p.blobs.len()).sum();
        if self.unindexed.len() >= INDEX_EVERY
            || blobs >= INDEX_BLOBS
            || self.last_index.elapsed() >= self.index_interval
        {
            self.write_index()?;
        }
        Ok(())
    }

    /// The pack under a name no prune has marked (FORMAT.md section 6): a pack of the
    /// same blobs as a marked one has its bytes and name, and a prune deleting the marked
    /// pack would delete this one too; so such a pack gets a padding blob of zero bytes (a
    /// valid data blob) until its name is new.
    fn unmarked_name(&self, id: Id, bytes: Vec<u8>, entries: Vec<Entry>) -> PackParts {
        let (mut id, mut bytes, mut entries) = (id, bytes, entries);
        let mut padding = 0u32;
        while self.marked.contains(&id) {
            let mut pack = PackWriter::reopen(bytes, entries);
            let zeros = vec![0; padding as usize];
            let blob = self.repo.config.id_key.id(&zeros);
            if !pack.contains(&blob) {
                pack.add(BlobType::Data, blob, Compression::None, &zeros, padding);
            }
            (id, bytes, entries) = pack.finish(&self.repo.config.id_key);
            padding += 1;
        }
        (id, bytes, entries)
    }

    /// Closes both open packs, waits for every upload and writes the last index object.
    pub(super) fn finish(&mut self) -> Result<()> {
        self.flush_pack(BlobType::Data)?;
        self.flush_pack(BlobType::Tree)?;
        self.write_index()
    }

    /// Waits for every pack upload, then writes one index object listing them, if the
    /// session held before and after (FORMAT.md section 9.2). A backup paused past its
    /// session's timeout may find packs it had not indexed deleted by prunes that took it
    /// for dead: listed in an index object, later backups would take their blobs as
    /// stored. On a lapse found after the write the object is deleted again; the backup
    /// fails either way, and its packs are a stopped backup's.
    fn write_index(&mut self) -> Result<()> {
        while let Some(done) = self.handle.block_on(self.uploads.join_next()) {
            done.map_err(|e| RepoError::task("upload task", &e))??;
        }
        if self.unindexed.is_empty() {
            return Ok(());
        }
        let index = IndexJson {
            packs: std::mem::take(&mut self.unindexed),
        };
        let bytes = serde_json::to_vec(&index).expect("index serializes");
        let id = self.repo.config.id_key.id(&bytes);
        self.handle.block_on(async {
            self.session.confirm().await?;
            let storage = &self.repo.storage;
            storage
                .put(FileType::Index, &id.to_hex(), Bytes::from(bytes))
                .await?;
            if let Err(e) = self.session.confirm().await {
                // Best effort: if this fails too, `check` names the missing packs.
                let _ = storage.delete(FileType::Index, &id.to_hex()).await;
                return Err(e);
            }
            Ok(())
        })?;
        self.written.extend(index.packs);
        self.written_names.push(id.to_hex());
        self.last_index = Instant::now();
        Ok(())
    }
}

/// Refuses a tree blob of `len` bytes that a pack cannot hold (a blob's length is 32 bits):
/// a directory of a file with more than about 56 M chunks (a 56 TiB image at 1 MiB blocks),
/// or of tens of millions of entries.
fn tree_fits(len: usize) -> Result<()> {
    if u32::try_from(len).is_err() {
        return Err(RepoError::Invalid(format!(
            "a directory's tree would take {len} bytes, more than a blob may hold (4 GiB): \
             a file of more than about 56 M chunks, or a directory of tens of millions of \
             entries, cannot be stored yet"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tree_fits;

    /// Regression: a tree blob over 4 GiB (a file of more than about 56 M chunks) hit
    /// `expect("chunks are under 4 GiB")`.
    #[test]
    fn a_tree_too_large_for_a_blob_is_an_error_not_a_panic() {
        assert!(tree_fits(u32::MAX as usize).is_ok());
        let err = tree_fits(u32::MAX as usize + 1).unwrap_err();
        assert!(
            err.to_string().contains("more than a blob may hold"),
            "{err}"
        );
    }
}

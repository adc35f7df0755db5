//! `kura backup`: read, chunk, hash, look up, compress, pack, upload; then trees, index,
//! snapshot, in the order FORMAT.md section 7 requires.
//!
//! Reading and chunking run on a blocking-pool thread; packs upload
//! on the runtime, at most `UPLOADS_IN_FLIGHT` at once, so memory is bounded by
//! `(UPLOADS_IN_FLIGHT + 2) * pack_size` (one pack filling per blob type) plus the chunker's
//! window (four times the largest chunk) and its batch of compressed chunks, whatever the data.
//! Chunks are hashed and compressed on every core in batches (`par_map`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek as _, SeekFrom};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::backend::{Backend, FileType};
use crate::blob::{self, BlobType};
use crate::config::now_rfc3339;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::index::{INDEX_BLOBS, INDEX_EVERY, IndexJson, PackJson};
use crate::pack::PackWriter;
use crate::repository::Repository;
use crate::snapshot::{Snapshot, Summary};
use crate::tree::{Content, Node, NodeType, Tree};

/// Packs uploading at once.
pub const UPLOADS_IN_FLIGHT: usize = 4;
/// Bytes of chunks below which a batch is hashed and compressed on the reading thread.
pub const PARALLEL_MIN: usize = 1 << 20;

/// `f` over `items` on one scoped thread per state (contiguous shares), results in order.
fn par_map<T: Sync, S: Send, R: Send>(
    items: &[T],
    states: &mut [S],
    f: impl Fn(&mut S, &T) -> R + Sync,
) -> Vec<R> {
    let share = items.len().div_ceil(states.len().max(1)).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(share)
            .zip(states.iter_mut())
            .map(|(part, state)| {
                let f = &f;
                scope.spawn(move || part.iter().map(|t| f(state, t)).collect::<Vec<R>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a hashing thread panicked"))
            .collect()
    })
}

/// What to back up.
pub enum Source {
    /// Files and directories.
    Paths(Vec<PathBuf>),
    /// A stream, stored as one file called `name`.
    Stdin {
        /// The file name in the snapshot.
        name: String,
        /// The stream.
        reader: Box<dyn Read + Send>,
    },
    /// A block device or image file, cut into fixed chunks; zero chunks become holes.
    Block(PathBuf),
}

/// Snapshot labels.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Host name.
    pub host: String,
    /// Tags.
    pub tags: Vec<String>,
    /// Parent snapshot: files whose size, mtime, ctime and inode match its record are not
    /// read again.
    pub parent: Option<Id>,
}

/// Runs a backup and writes its snapshot.
///
/// # Panics
/// Outside a tokio runtime.
///
/// # Errors
/// Storage errors end the backup (nothing after the last written index is referenced);
/// unreadable files do not: they are listed in the snapshot, which is then `incomplete`.
pub async fn backup<B: Backend>(
    repo: &mut Repository<B>,
    source: Source,
    opts: Options,
) -> Result<(Id, Snapshot)> {
    let handle = Handle::current();
    // Marks first, then the index: a prune that deletes a marked pack rewrites the index
    // before it deletes the mark, so a mark gone by now means an index read now no longer
    // lists its packs. The index the repository was opened with may be older than that.
    let marked = crate::marks::marked_packs(repo).await?;
    repo.refresh_index().await?;
    let parent_root = match &opts.parent {
        Some(id) => Some(repo.load_snapshot(id).await?.tree),
        None => None,
    };
    // The walk is synchronous (file reads) and runs on a blocking-pool thread of its own;
    // it drives uploads with `Handle::block_on`, which must not nest inside the caller's
    // own `block_on` (a wake-up of the caller's future would be lost).
    let writer_repo = repo.clone();
    let (result, written, names) = tokio::task::spawn_blocking(move || {
        let mut w = match Writer::new(writer_repo, handle, marked) {
            Ok(w) => w,
            Err(e) => return (Err(e), Vec::new(), Vec::new()),
        };
        let result = w.run(source, opts, parent_root);
        (result, w.written, w.written_names)
    })
    .await
    .map_err(|e| RepoError::Storage(format!("backup thread: {e}")))?;
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

struct Writer<B: Backend> {
    repo: Repository<B>,
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
    zstd: blob::Compressors,
    /// One zstd context per core, for batches hashed and compressed in parallel.
    workers: Vec<blob::Compressors>,
    /// The chunker's window, reused for every file: four times the largest chunk.
    cdc_buf: Vec<u8>,
    summary: Summary,
    errors: Vec<String>,
}

impl<B: Backend> Writer<B> {
    fn new(repo: Repository<B>, handle: Handle, marked: HashSet<Id>) -> Result<Self> {
        let first_pack = Vec::with_capacity(pack_capacity(&repo.config.params));
        Ok(Writer {
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
            workers: (0..std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
                .map(|_| blob::Compressors::new())
                .collect::<Result<_>>()?,
            cdc_buf: Vec::new(),
            summary: Summary::default(),
            errors: Vec::new(),
        })
    }

    /// The whole backup: the source, the last packs and index, then the snapshot.
    fn run(
        &mut self,
        source: Source,
        opts: Options,
        parent_root: Option<Id>,
    ) -> Result<(Id, Snapshot)> {
        let started = now_rfc3339();
        let parent = match parent_root {
            Some(t) => Some(self.handle.block_on(self.repo.read_tree(&t))?),
            None => None,
        };
        let (root, paths) = self.save_source(source, parent.as_ref())?;
        self.flush_pack(BlobType::Data)?;
        self.flush_pack(BlobType::Tree)?;
        self.write_index()?;
        let snap = Snapshot {
            time: started,
            host: opts.host,
            tags: opts.tags,
            paths,
            tree: root,
            parent: opts.parent,
            incomplete: !self.errors.is_empty(),
            errors: std::mem::take(&mut self.errors),
            summary: std::mem::take(&mut self.summary),
            program: format!("kura {}", env!("CARGO_PKG_VERSION")),
        };
        let bytes = serde_json::to_vec_pretty(&snap).expect("snapshot serializes");
        let id = self.repo.config.id_key.id(&bytes);
        self.handle.block_on(self.repo.backend.put(
            FileType::Snapshot,
            &id.to_hex(),
            Bytes::from(bytes),
        ))?;
        Ok((id, snap))
    }

    fn save_source(&mut self, source: Source, parent: Option<&Tree>) -> Result<(Id, Vec<String>)> {
        let mut root = Tree::default();
        let mut paths = Vec::new();
        match source {
            Source::Paths(list) => {
                unique_top_names(&list)?;
                for path in list {
                    paths.push(path.display().to_string());
                    let name = top_name(&path);
                    let before = parent.and_then(|t| t.find(&name));
                    match std::fs::symlink_metadata(&path) {
                        Ok(meta) => {
                            if let Some(node) = self.save_node(&path, &name, &meta, before)? {
                                root.nodes.push(node);
                            }
                        }
                        Err(e) => self.errors.push(format!("{}: {e}", path.display())),
                    }
                }
            }
            Source::Stdin { name, reader } => {
                paths.push(format!("-:{name}"));
                let mut node = Node {
                    kind: Some(NodeType::File),
                    mode: 0o644,
                    mtime: now_ns(),
                    links: 1,
                    ..Node::default()
                };
                node.set_name(std::ffi::OsStr::new(&name));
                // Checked before stdin is read: a restore to a directory refuses an
                // entry named `a/b` or nothing.
                if !node.name_is_safe() {
                    return Err(RepoError::Invalid(format!(
                        "the stream's name {name:?} is not a plain file name (no `/`, not empty)"
                    )));
                }
                let (content, size) = self.save_cdc(reader, None)?;
                node.size = Some(size);
                node.content = Some(content);
                self.summary.files += 1;
                root.nodes.push(node);
            }
            Source::Block(path) => {
                paths.push(path.display().to_string());
                let meta = std::fs::metadata(&path).map_err(|e| RepoError::io(&path, e))?;
                let mut file = File::open(&path).map_err(|e| RepoError::io(&path, e))?;
                // A block device's metadata says 0 bytes; its end says how large it is.
                let len = file
                    .seek(SeekFrom::End(0))
                    .and_then(|n| file.seek(SeekFrom::Start(0)).map(|_| n))
                    .map_err(|e| RepoError::io(&path, e))?;
                self.repo.progress.set_total(len);
                let mut node = node_from_meta(&meta, NodeType::File);
                node.set_name(path.file_name().unwrap_or(std::ffi::OsStr::new("device")));
                let (content, size) = self.save_fixed(file, &path)?;
                node.size = Some(size);
                node.content = Some(content);
                self.summary.files += 1;
                root.nodes.push(node);
            }
        }
        root.sort();
        let id = self.save_tree(&root)?;
        Ok((id, paths))
    }

    /// One directory entry, or `None` when it could not be read (recorded as an error).
    fn save_node(
        &mut self,
        path: &Path,
        name: &std::ffi::OsStr,
        meta: &std::fs::Metadata,
        before: Option<&Node>,
    ) -> Result<Option<Node>> {
        let ft = meta.file_type();
        let kind = if ft.is_dir() {
            NodeType::Dir
        } else if ft.is_file() {
            NodeType::File
        } else if ft.is_symlink() {
            NodeType::Symlink
        } else if ft.is_char_device() {
            NodeType::Chardev
        } else if ft.is_block_device() {
            NodeType::Blockdev
        } else if ft.is_fifo() {
            NodeType::Fifo
        } else {
            NodeType::Socket
        };
        let mut node = node_from_meta(meta, kind);
        node.set_name(name);
        let unchanged = kind == NodeType::File && self.unchanged(&node, meta, before);
        // Read for every entry, unchanged files too: a parent written before xattrs were
        // recorded, or whose read of them failed, must not pass its lack on.
        node.xattrs = self.xattrs(path);
        match kind {
            NodeType::File if unchanged => {
                let before = before.expect("unchanged has a parent node");
                node.size = before.size;
                node.content.clone_from(&before.content);
                self.summary.files += 1;
                self.summary.files_unchanged += 1;
            }
            NodeType::File => {
                let file = match open_as_listed(path, meta) {
                    Ok(f) => f,
                    Err(e) => {
                        self.errors.push(format!("{}: {e}", path.display()));
                        return Ok(None);
                    }
                };
                match self.save_cdc(file, Some(meta.len())) {
                    Ok((content, size)) => {
                        node.size = Some(size);
                        node.content = Some(content);
                    }
                    Err(RepoError::Io { path: _, source }) => {
                        self.errors.push(format!("{}: {source}", path.display()));
                        return Ok(None);
                    }
                    Err(e) => return Err(e),
                }
                self.summary.files += 1;
            }
            NodeType::Dir => {
                let before = before
                    .filter(|b| b.kind == Some(NodeType::Dir))
                    .and_then(|b| b.subtree);
                let Some(tree) = self.read_dir(path, before)? else {
                    return Ok(None);
                };
                node.subtree = Some(self.save_tree(&tree)?);
                self.summary.dirs += 1;
            }
            NodeType::Symlink => match std::fs::read_link(path) {
                Ok(t) => node.target_hex = Some(hex::encode(t.as_os_str().as_bytes())),
                Err(e) => {
                    self.errors.push(format!("{}: {e}", path.display()));
                    return Ok(None);
                }
            },
            NodeType::Chardev | NodeType::Blockdev => node.rdev = Some(meta.rdev()),
            NodeType::Fifo | NodeType::Socket => {}
        }
        Ok(Some(node))
    }

    /// Publishes the counters so far to the repository handle's progress.
    fn report(&self) {
        let s = &self.summary;
        self.repo.progress.set(s.files, s.bytes_read, s.bytes_added);
    }

    /// The xattrs of `path` for its node (`None` when it has none); a failure to read them,
    /// or a name that is not UTF-8 (FORMAT.md 8.1), is recorded as an error.
    fn xattrs(&mut self, path: &Path) -> Option<Vec<(String, String)>> {
        let attrs = match crate::fsmeta::read_xattrs(path) {
            Ok(a) => a,
            Err(e) => {
                self.errors
                    .push(format!("{}: extended attributes: {e}", path.display()));
                return None;
            }
        };
        let mut out = Vec::with_capacity(attrs.len());
        for (name, value) in attrs {
            match String::from_utf8(name) {
                Ok(name) => out.push((name, hex::encode(value))),
                Err(e) => self.errors.push(format!(
                    "{}: extended attribute name {:?} is not UTF-8",
                    path.display(),
                    String::from_utf8_lossy(e.as_bytes())
                )),
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Whether a file can keep its parent's content without being read: same size, mtime,
    /// ctime and inode, and every blob still in the index.
    fn unchanged(&self, node: &Node, meta: &std::fs::Metadata, before: Option<&Node>) -> bool {
        let Some(b) = before else { return false };
        b.kind == Some(NodeType::File)
            && b.size == Some(meta.len())
            && b.mtime == node.mtime
            && b.ctime == node.ctime
            && b.inode == node.inode
            && b.content.as_deref().is_some_and(|c| {
                c.iter().all(|c| match c {
                    Content::Blob { blob } => self.stored(blob) || self.added.contains(blob),
                    Content::Zero { .. } => true,
                })
            })
    }

    fn read_dir(&mut self, path: &Path, before: Option<Id>) -> Result<Option<Tree>> {
        let parent = match before {
            Some(id) => Some(self.handle.block_on(self.repo.read_tree(&id))?),
            None => None,
        };
        let entries = match std::fs::read_dir(path) {
            Ok(e) => e,
            Err(e) => {
                self.errors.push(format!("{}: {e}", path.display()));
                return Ok(None);
            }
        };
        let mut tree = Tree::default();
        let mut names = Vec::new();
        for entry in entries {
            match entry {
                Ok(e) => names.push(e.file_name()),
                Err(e) => self.errors.push(format!("{}: {e}", path.display())),
            }
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names {
            let child = path.join(&name);
            let before = parent.as_ref().and_then(|t| t.find(&name));
            match std::fs::symlink_metadata(&child) {
                Ok(meta) => {
                    if let Some(node) = self.save_node(&child, &name, &meta, before)? {
                        tree.nodes.push(node);
                    }
                    self.report();
                }
                Err(e) => self.errors.push(format!("{}: {e}", child.display())),
            }
        }
        Ok(Some(tree))
    }

    /// Content-defined chunks of a stream. The window holds four times the largest chunk: a
    /// cut is final once `max` bytes follow its start (or the input ended), so chunks are
    /// cut in place and only the unfinished tail moves, once per refill.
    ///
    /// `size_hint` (a file's length) keeps the window small for small files: a tree of
    /// small files then never touches the full window's pages. The window grows to its
    /// full size as soon as the input turns out longer.
    fn save_cdc(
        &mut self,
        mut reader: impl Read,
        size_hint: Option<u64>,
    ) -> Result<(Vec<Content>, u64)> {
        let c = self.repo.config.params.chunker;
        let max = c.max as usize;
        let window = 4 * max;
        let mut buf = std::mem::take(&mut self.cdc_buf);
        let first = size_hint
            .and_then(|n| usize::try_from(n).ok())
            .map_or(window, |n| (n + 1).clamp(64 << 10, window));
        if buf.len() < first {
            buf.resize(first, 0);
        }
        let mut content = Vec::new();
        let (mut len, mut size, mut eof) = (0usize, 0u64, false);
        let result = loop {
            if !eof && len == buf.len() && buf.len() < window {
                buf.resize(window, 0);
            }
            while !eof && len < buf.len() {
                match reader.read(&mut buf[len..]) {
                    Ok(0) => eof = true,
                    Ok(n) => len += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(RepoError::io(Path::new("input"), e)),
                }
            }
            let mut start = 0;
            let mut ranges = Vec::new();
            for (offset, length) in crate::cdc::chunks(&buf[..len], c) {
                if !eof && len - offset < max {
                    break;
                }
                ranges.push((offset, length));
                start = offset + length;
            }
            match self.save_data_chunks(&buf, &ranges) {
                Ok(ids) => content.extend(ids.into_iter().map(|blob| Content::Blob { blob })),
                Err(e) => {
                    self.cdc_buf = buf;
                    return Err(e);
                }
            }
            size += start as u64;
            self.summary.bytes_read += start as u64;
            self.report();
            buf.copy_within(start..len, 0);
            len -= start;
            if eof && len == 0 {
                break Ok((content, size));
            }
        };
        self.cdc_buf = buf;
        result
    }

    /// Fixed chunks of a device or image; all-zero chunks become holes.
    fn save_fixed(&mut self, mut file: File, path: &Path) -> Result<(Vec<Content>, u64)> {
        let block = self.repo.config.params.block_size as usize;
        // Several blocks per read (16 MiB), so that hashing and compressing have a batch
        // worth sharing between threads.
        let blocks_per_read = ((16 << 20) / block).max(1);
        let mut buf = vec![0u8; block * blocks_per_read];
        let mut content: Vec<Content> = Vec::new();
        let mut size = 0u64;
        loop {
            let mut filled = 0;
            while filled < buf.len() {
                match file.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(RepoError::io(path, e)),
                }
            }
            size += filled as u64;
            self.summary.bytes_read += filled as u64;
            self.report();
            // (offset, len, is all zeros) per block; only the others are stored.
            let blocks: Vec<(usize, usize, bool)> = (0..filled)
                .step_by(block)
                .map(|o| {
                    let l = block.min(filled - o);
                    (o, l, buf[o..o + l].iter().all(|&b| b == 0))
                })
                .collect();
            let data: Vec<(usize, usize)> = blocks
                .iter()
                .filter(|b| !b.2)
                .map(|&(o, l, _)| (o, l))
                .collect();
            let mut ids = self.save_data_chunks(&buf, &data)?.into_iter();
            for (_, l, zero) in blocks {
                if !zero {
                    let blob = ids.next().expect("one ID per data block");
                    content.push(Content::Blob { blob });
                } else if let Some(Content::Zero { zero }) = content.last_mut() {
                    *zero += l as u64;
                } else {
                    content.push(Content::Zero { zero: l as u64 });
                }
            }
            if filled < buf.len() {
                break;
            }
        }
        Ok((content, size))
    }

    fn save_tree(&mut self, tree: &Tree) -> Result<Id> {
        let json = serde_json::to_vec(tree).expect("tree serializes");
        tree_fits(json.len())?;
        self.save_blob(BlobType::Tree, &json)
    }

    /// Stores a blob unless the repository or this backup has it already.
    fn save_blob(&mut self, kind: BlobType, raw: &[u8]) -> Result<Id> {
        let id = self.repo.config.id_key.id(raw);
        if !self.is_new(&id) {
            return Ok(id);
        }
        let compressed = self.zstd.compress(kind, raw);
        self.add_stored(kind, id, raw, compressed)?;
        Ok(id)
    }

    /// Whether a blob must be stored (and, if so, it now counts as added).
    fn is_new(&mut self, id: &Id) -> bool {
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

    /// Data chunks `buf[offset..offset + len]`, in order. A batch of at least
    /// `PARALLEL_MIN` bytes is hashed, then compressed, on every core; smaller ones (small
    /// files) go one by one, without the threads and zstd contexts that would cost more.
    fn save_data_chunks(&mut self, buf: &[u8], ranges: &[(usize, usize)]) -> Result<Vec<Id>> {
        let total: usize = ranges.iter().map(|r| r.1).sum();
        if ranges.len() < 2 || total < PARALLEL_MIN {
            return ranges
                .iter()
                .map(|&(o, l)| self.save_blob(BlobType::Data, &buf[o..o + l]))
                .collect();
        }
        let key = &self.repo.config.id_key;
        let mut zstd = std::mem::take(&mut self.workers);
        let ids: Vec<Id> = par_map(ranges, &mut zstd, |_, &(o, l)| key.id(&buf[o..o + l]));
        let fresh: Vec<usize> = (0..ids.len()).filter(|&i| self.is_new(&ids[i])).collect();
        let compressed = par_map(&fresh, &mut zstd, |z, &i| {
            let (o, l) = ranges[i];
            z.compress(BlobType::Data, &buf[o..o + l])
        });
        self.workers = zstd;
        for (&i, c) in fresh.iter().zip(compressed) {
            let (o, l) = ranges[i];
            self.add_stored(BlobType::Data, ids[i], &buf[o..o + l], c)?;
        }
        Ok(ids)
    }

    /// Appends a blob's stored form to the open pack of its type.
    fn add_stored(
        &mut self,
        kind: BlobType,
        id: Id,
        raw: &[u8],
        (compression, compressed): (blob::Compression, Option<Vec<u8>>),
    ) -> Result<()> {
        let stored = compressed.as_deref().unwrap_or(raw);
        let raw_len = u32::try_from(raw.len()).expect("chunks are under 4 GiB");
        self.packs[kind as usize].add(kind, id, compression, stored, raw_len);
        self.summary.blobs_added += 1;
        self.summary.bytes_added += raw.len() as u64;
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
        self.summary.bytes_stored += bytes.len() as u64;
        self.unindexed.push(PackJson::new(id, &entries));
        let permit = self
            .handle
            .block_on(self.permits.clone().acquire_owned())
            .expect("the semaphore is never closed");
        let backend = self.repo.backend.clone();
        let buffers = self.buffers.clone();
        self.uploads.spawn_on(
            async move {
                let bytes = Bytes::from(bytes);
                let r = backend
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
            done.map_err(|e| RepoError::Storage(format!("upload task: {e}")))??;
        }
        let blobs: usize = self.unindexed.iter().map(|p| p.blobs.len()).sum();
        if self.unindexed.len() >= INDEX_EVERY || blobs >= INDEX_BLOBS {
            self.write_index()?;
        }
        Ok(())
    }

    /// Waits for every pack upload, then writes one index object listing them.
    fn write_index(&mut self) -> Result<()> {
        while let Some(done) = self.handle.block_on(self.uploads.join_next()) {
            done.map_err(|e| RepoError::Storage(format!("upload task: {e}")))??;
        }
        if self.unindexed.is_empty() {
            return Ok(());
        }
        let index = IndexJson {
            packs: std::mem::take(&mut self.unindexed),
        };
        let bytes = serde_json::to_vec(&index).expect("index serializes");
        let id = self.repo.config.id_key.id(&bytes);
        self.handle.block_on(self.repo.backend.put(
            FileType::Index,
            &id.to_hex(),
            Bytes::from(bytes),
        ))?;
        self.written.extend(index.packs);
        self.written_names.push(id.to_hex());
        Ok(())
    }
}

fn node_from_meta(meta: &std::fs::Metadata, kind: NodeType) -> Node {
    Node {
        kind: Some(kind),
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        ctime: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        inode: meta.ino(),
        dev: meta.dev(),
        links: meta.nlink(),
        ..Node::default()
    }
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0))
}

/// Opens the regular file that `listed` (its `lstat`) describes, or fails: the path is
/// looked up without following a symlink or opening what it names, and must name the same
/// file, which is then opened. In a tree others can write to, a file swapped for a symlink between the
/// listing and the open would otherwise store the link's target (`/etc/shadow`) under the
/// file's name, owner and mode, and one swapped for a FIFO would hang the backup.
fn open_as_listed(path: &Path, listed: &std::fs::Metadata) -> std::io::Result<File> {
    use rustix::fs::OFlags;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let open = |path: &Path, flags: OFlags| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits().cast_signed())
            .open(path)
    };
    let same = |file: &File| -> std::io::Result<()> {
        let opened = file.metadata()?;
        if !opened.is_file() || opened.dev() != listed.dev() || opened.ino() != listed.ino() {
            return Err(std::io::Error::other(
                "replaced by another file while the backup listed it; not read",
            ));
        }
        Ok(())
    };
    // An O_PATH descriptor opens nothing (no FIFO waits for a writer), and the file it
    // names, once checked, is opened for reading through /proc like any open: one under a
    // lease (Samba, the NFS server) waits for the holder to let go rather than failing.
    let handle = open(path, OFlags::PATH | OFlags::NOFOLLOW)?;
    same(&handle)?;
    // The wait is the kernel's: a holder that does not let go is broken after
    // /proc/sys/fs/lease-break-time (45 s by default), so a hostile one costs that much
    // per file, never a hang.
    match File::open(format!("/proc/self/fd/{}", handle.as_raw_fd())) {
        Ok(file) => {
            same(&file)?;
            Ok(file)
        }
        // No /proc (a bare container): a non-blocking open cannot hang on a FIFO swapped
        // in since, but fails on a leased file.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let file = open(path, OFlags::NOFOLLOW | OFlags::NONBLOCK)?;
            same(&file)?;
            Ok(file)
        }
        Err(e) => Err(e),
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

/// The name a backed-up path has at the top of its snapshot: its last component, or
/// `root` for `/` and `.`.
fn top_name(path: &Path) -> std::ffi::OsString {
    path.file_name().map_or_else(
        || std::ffi::OsString::from("root"),
        std::ffi::OsStr::to_owned,
    )
}

/// Refuses paths that would share a name at the top of the snapshot (`/srv/a/data` and
/// `/srv/b/data`, or `/` and `.`): the snapshot could not hold both, and a restore refuses
/// a tree with two entries of one name.
fn unique_top_names(list: &[PathBuf]) -> Result<()> {
    let mut seen: HashMap<std::ffi::OsString, &Path> = HashMap::new();
    for path in list {
        if let Some(first) = seen.insert(top_name(path), path) {
            return Err(RepoError::Invalid(format!(
                "{} and {} would both be `{}` at the top of the snapshot: back them up \
                 in separate snapshots, or back up a directory that holds both",
                first.display(),
                path.display(),
                top_name(path).display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{open_as_listed, tree_fits};

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

    #[test]
    fn a_file_replaced_after_its_listing_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, secret) = (dir.path().join("f"), dir.path().join("secret"));
        std::fs::write(&path, b"mine").unwrap();
        std::fs::write(&secret, b"not yours").unwrap();
        let listed = std::fs::symlink_metadata(&path).unwrap();
        assert!(open_as_listed(&path, &listed).is_ok());

        // Swapped for a symlink to another file: not followed. (The listed file is kept
        // under another name, so that no new file can get its inode number.)
        std::fs::rename(&path, dir.path().join("f.listed")).unwrap();
        std::os::unix::fs::symlink(&secret, &path).unwrap();
        assert!(open_as_listed(&path, &listed).is_err());

        // Swapped for another file under the same name: not the listed one.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(dir.path().join("other"), b"other").unwrap();
        std::fs::rename(dir.path().join("other"), &path).unwrap();
        assert!(open_as_listed(&path, &listed).is_err());

        // Swapped for a FIFO: refused at once, not a hang.
        std::fs::remove_file(&path).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(open_as_listed(&path, &listed).is_err());
    }

    /// Regression: a non-blocking open fails with EAGAIN on a file under a lease (Samba and
    /// the NFS server take them), so such files were left out of the backup. The holder
    /// here (a python3 process, as a file server would) lets go when told to.
    #[test]
    fn a_file_under_a_lease_is_read_once_the_holder_lets_go() {
        use std::io::{BufRead as _, Read as _};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leased");
        std::fs::write(&path, b"served").unwrap();
        let holder = "import fcntl, os, signal, sys, time\n\
            fd = os.open(sys.argv[1], os.O_RDWR)\n\
            signal.signal(signal.SIGIO, lambda *_: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK))\n\
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n\
            print('leased', flush=True)\n\
            time.sleep(30)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", holder])
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line != "leased\n" {
            let mut why = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut why);
            panic!("the lease holder could not take a write lease (F_SETLEASE): {why}");
        }
        let listed = std::fs::symlink_metadata(&path).unwrap();
        let opened = open_as_listed(&path, &listed);
        child.kill().unwrap();
        child.wait().unwrap();
        let mut text = String::new();
        opened.unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "served");
    }
}

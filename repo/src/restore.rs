//! `kura restore`: a snapshot's tree back onto a directory, or one file to a writer.
//!
//! Blobs are fetched one at a time by range GET through the gateway (FORMAT.md section 6)
//! and checked against their IDs; holes (`zero` entries) are skipped, so restored files
//! are sparse where the source was zero.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;

use crate::backend::{Backend, FileType};
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::include::Include;
use crate::repository::Repository;
use crate::tree::{Content, Node, NodeType, Tree};

/// Counts of what a restore wrote.
#[derive(Debug, Default)]
pub struct RestoreSummary {
    /// Files written (hard links included).
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Device nodes, FIFOs and sockets created.
    pub special: u64,
    /// Entries that could not be created (device nodes without privileges), with why.
    pub skipped: Vec<String>,
    /// Metadata that could not be applied (xattrs, times, modes), as `path: what`; owners
    /// that need privileges are not listed.
    pub metadata_failed: Vec<String>,
    /// Entries that could not be restored (content that failed verification or could not
    /// be fetched, a damaged directory tree, a name the target refused), as `path: why`.
    /// A file that failed is removed, never left with part of its content.
    pub failed: Vec<String>,
}

/// Entries that may fail one after another before a restore asks whether the storage still
/// serves the repository (one GET of its `config`). Damage fails entries in long runs too
/// (small files share packs), so the run alone decides nothing: the restore gives up only
/// when that GET fails as well, which is an outage, and otherwise goes on.
pub const FAILURES_IN_A_ROW: usize = 16;

/// Restores the tree `root` under `target` (created if missing): the entries `include`
/// selects, with the directories leading to them. An entry that fails is listed in
/// [`RestoreSummary::failed`] and the restore goes on with the next.
///
/// # Errors
/// The root tree cannot be read or `target` created, or [`FAILURES_IN_A_ROW`] entries
/// failed one after another and the storage no longer serves the repository's `config`
/// (the last entry's error).
pub async fn restore<B: Backend>(
    repo: &Repository<B>,
    root: &Id,
    target: &Path,
    include: &Include,
) -> Result<RestoreSummary> {
    std::fs::create_dir_all(target).map_err(|e| RepoError::io(target, e))?;
    let mut r = Restorer {
        repo,
        include,
        links: HashMap::new(),
        failed_files: HashSet::new(),
        summary: RestoreSummary::default(),
        in_a_row: 0,
        target_in_a_row: 0,
    };
    let tree = r.repo.read_tree(root).await?;
    r.dir(tree, target, "", false).await?;
    Ok(r.summary)
}

/// Refuses a node that is not a regular file where only a file's content can go: a
/// directory or a link has none, and writing "nothing" would truncate the target (or
/// feed an empty stream to a pipe) and report success.
fn one_file(node: &Node) -> Result<()> {
    if node.kind == Some(NodeType::File) {
        return Ok(());
    }
    let kind = node.kind.map_or_else(
        || "an entry of unknown type".to_string(),
        |k| format!("a {k:?}"),
    );
    Err(RepoError::Invalid(format!(
        "the snapshot holds {kind} ({}), not a file: restore it to a directory",
        node.name().to_string_lossy()
    )))
}

/// Writes the content of a file node to `out` (for `kura restore SNAP -`).
///
/// # Errors
/// [`RepoError::Invalid`] for a node that is not a regular file; storage and
/// verification errors, or when `out` fails.
pub async fn write_content<B: Backend>(
    repo: &Repository<B>,
    node: &Node,
    out: &mut impl Write,
) -> Result<u64> {
    one_file(node)?;
    let mut written = 0u64;
    let mut fetched = fetch_ahead(repo, node);
    while let Some(item) = fetched.next().await {
        match item? {
            (_, Some(data)) => {
                out.write_all(&data)
                    .map_err(|e| RepoError::io(Path::new("-"), e))?;
                written += data.len() as u64;
            }
            (zero, None) => {
                write_zeros(out, zero).map_err(|e| RepoError::io(Path::new("-"), e))?;
                written += zero;
            }
        }
    }
    Ok(written)
}

struct Restorer<'a, B: Backend> {
    repo: &'a Repository<B>,
    include: &'a Include,
    /// (dev, inode) of multiply-linked files already restored, and where.
    links: HashMap<(u64, u64), PathBuf>,
    /// Files whose content failed: their further hard-link names cannot be made.
    failed_files: HashSet<PathBuf>,
    summary: RestoreSummary,
    /// Entries failed since the last one restored.
    in_a_row: usize,
    /// How many of those, the last ones, were errors of the target itself.
    target_in_a_row: usize,
}

impl<B: Backend> Restorer<'_, B> {
    /// Restores the entries of one directory: all of them when `inside` (the directory
    /// itself was selected), else those `include` selects. Returns whether it wrote any.
    /// An error is an abort ([`Restorer::failed`]); entries that fail are listed.
    async fn dir(&mut self, tree: Tree, dir: &Path, rel: &str, inside: bool) -> Result<bool> {
        let mut wrote = false;
        if let Err(why) = tree.check_names() {
            let e = RepoError::corrupt("tree", format!("{why} in {rel:?}"));
            self.failed(rel, e).await?;
            return Ok(false);
        }
        // Directories are recursed into after this directory's files are written, and get
        // their metadata last (writing into a directory changes its mtime).
        let mut subdirs = Vec::new();
        let mut small = Vec::new();
        let mut large = Vec::new();
        let mut links = Vec::new();
        for node in &tree.nodes {
            let name = node.name();
            let path = dir.join(&name);
            let rel = if rel.is_empty() {
                String::from_utf8_lossy(name.as_bytes()).into_owned()
            } else {
                format!("{rel}/{}", String::from_utf8_lossy(name.as_bytes()))
            };
            let matched = inside || self.include.matches(&rel);
            if node.kind == Some(NodeType::Dir) {
                if matched || self.include.may_contain(&rel) {
                    subdirs.push((node, path, rel, matched));
                }
                continue;
            }
            if !matched {
                continue;
            }
            wrote = true;
            match node.kind {
                Some(NodeType::Dir) => unreachable!("directories are handled above"),
                Some(NodeType::File) => {
                    if node.links > 1 {
                        let key = (node.dev, node.inode);
                        if let Some(first) = self.links.get(&key) {
                            links.push((first.clone(), path, rel));
                            continue;
                        }
                        self.links.insert(key, path.clone());
                    }
                    if node.content.as_ref().is_some_and(|c| c.len() > 1) {
                        large.push((node, path, rel));
                    } else {
                        small.push((node, path, rel));
                    }
                }
                _ => match self.link_or_special(node, &path, &rel) {
                    Ok(()) => self.succeeded(),
                    Err(e) => self.failed(&rel, e).await?,
                },
            }
        }

        self.write_files(small, large, links).await?;
        for (node, path, rel, matched) in subdirs {
            // A directory entered only because a pattern may match below it is removed
            // again when nothing did (unless it was there before), and a symlink that stood
            // in its place is put back.
            let (link, existed, tree) = match self.enter(node, &path).await {
                Ok(entered) => entered,
                Err(e) => {
                    self.failed(&rel, e).await?;
                    continue;
                }
            };
            let below = match tree {
                Some(sub) => Box::pin(self.dir(sub, &path, &rel, matched)).await?,
                None => false,
            };
            if matched || below {
                wrote = true;
                self.summary.dirs += 1;
                self.apply_meta(&path, node, &rel);
            } else if !existed {
                let _ = std::fs::remove_dir(&path);
                if let Some(target) = link
                    && let Err(e) = std::os::unix::fs::symlink(&target, &path)
                {
                    let e = RepoError::io(&path, e);
                    self.failed(&format!("{rel} (the symlink that was there)"), e)
                        .await?;
                }
            }
        }
        Ok(wrote)
    }

    /// Writes a directory's regular files: those of at most one chunk several at once
    /// (each is one range GET, and a tree of small files would otherwise wait on one round
    /// trip per file); larger ones one at a time, with `FETCH_AHEAD` runs of chunks in
    /// flight; then the further names of hard-linked files. Memory: `SMALL_FILES_AT_ONCE`
    /// chunks plus `FETCH_AHEAD * FETCH_SPAN` bytes at most.
    async fn write_files(
        &mut self,
        small: Vec<(&Node, PathBuf, String)>,
        large: Vec<(&Node, PathBuf, String)>,
        links: Vec<(PathBuf, PathBuf, String)>,
    ) -> Result<()> {
        let repo = self.repo;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut done = futures::stream::iter(small)
            .take_while(|_| std::future::ready(!stop.load(std::sync::atomic::Ordering::Relaxed)))
            .map(|(node, path, rel)| async move {
                let n = new_file(repo, node, &path).await;
                (n, node, path, rel)
            })
            .buffer_unordered(SMALL_FILES_AT_ONCE);
        // Giving up starts no further file and waits for those in flight: each either
        // finishes or removes itself, so none is left with part of its content.
        let mut gave_up = None;
        while let Some((n, node, path, rel)) = done.next().await {
            match n {
                Ok(n) => self.file_done(n, node, &path, &rel),
                Err(e) if gave_up.is_none() => {
                    gave_up = self.file_failed(path, &rel, e).await.err();
                    stop.store(gave_up.is_some(), std::sync::atomic::Ordering::Relaxed);
                }
                Err(_) => {}
            }
        }
        drop(done);
        if let Some(e) = gave_up {
            return Err(e);
        }
        for (node, path, rel) in large {
            match new_file(repo, node, &path).await {
                Ok(n) => self.file_done(n, node, &path, &rel),
                Err(e) => self.file_failed(path, &rel, e).await?,
            }
        }
        for (first, path, rel) in links {
            if self.failed_files.contains(&first) {
                // Listed, but not another failure of the storage: the first name's was.
                self.summary.failed.push(format!(
                    "{rel}: a hard link of {}, which could not be restored",
                    first.display()
                ));
                continue;
            }
            let _ = std::fs::remove_file(&path);
            match std::fs::hard_link(&first, &path) {
                Ok(()) => {
                    self.summary.files += 1;
                    self.succeeded();
                }
                Err(e) => self.failed(&rel, RepoError::io(&path, e)).await?,
            }
        }
        Ok(())
    }

    /// Reads a directory node's tree, then makes its directory at `path`: returns the
    /// target's symlink set aside there, whether a directory was there, and the tree.
    async fn enter(
        &self,
        node: &Node,
        path: &Path,
    ) -> Result<(Option<PathBuf>, bool, Option<Tree>)> {
        let tree = match &node.subtree {
            Some(sub) => Some(self.repo.read_tree(sub).await?),
            None => None,
        };
        let link = unlink_symlink(path)?;
        let existed = path.is_dir();
        if let Err(e) = std::fs::create_dir_all(path) {
            if let Some(target) = &link {
                let _ = std::os::unix::fs::symlink(target, path);
            }
            return Err(RepoError::io(path, e));
        }
        Ok((link, existed, tree))
    }

    /// A symlink, device node, FIFO or socket.
    fn link_or_special(&mut self, node: &Node, path: &Path, rel: &str) -> Result<()> {
        match node.kind {
            Some(NodeType::Symlink) => {
                let target = hex::decode(node.target_hex.as_deref().unwrap_or_default())
                    .map_err(|e| RepoError::corrupt("tree", e))?;
                let _ = std::fs::remove_file(path);
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), path)
                    .map_err(|e| RepoError::io(path, e))?;
                self.summary.symlinks += 1;
                self.apply_meta(path, node, rel);
            }
            Some(NodeType::Chardev | NodeType::Blockdev | NodeType::Fifo | NodeType::Socket) => {
                match crate::fsmeta::make_special(path, node) {
                    Ok(()) => {
                        self.summary.special += 1;
                        self.apply_meta(path, node, rel);
                    }
                    Err(e) => self.summary.skipped.push(format!("{rel}: {e}")),
                }
            }
            _ => self.summary.skipped.push(format!("{rel}: no type")),
        }
        Ok(())
    }

    /// Lists an entry that could not be restored. After [`FAILURES_IN_A_ROW`] in a row,
    /// gives up (returns `e`) if all of them were the target's own errors (a full or
    /// read-only file system fails every entry after it) or the storage no longer serves
    /// the repository's `config`, and otherwise counts a new run.
    async fn failed(&mut self, rel: &str, e: RepoError) -> Result<()> {
        self.in_a_row += 1;
        if matches!(e, RepoError::Io { .. }) {
            self.target_in_a_row += 1;
        } else {
            self.target_in_a_row = 0;
        }
        if self.in_a_row >= FAILURES_IN_A_ROW {
            if self.target_in_a_row >= self.in_a_row
                || self.repo.backend().get(FileType::Config, "").await.is_err()
            {
                return Err(e);
            }
            self.succeeded();
        }
        self.summary.failed.push(format!("{rel}: {e}"));
        Ok(())
    }

    /// A regular file that could not be restored ([`new_file`] removed what it wrote).
    async fn file_failed(&mut self, path: PathBuf, rel: &str, e: RepoError) -> Result<()> {
        self.failed_files.insert(path);
        self.failed(rel, e).await
    }

    /// Ends a run of failures.
    fn succeeded(&mut self) {
        self.in_a_row = 0;
        self.target_in_a_row = 0;
    }

    fn file_done(&mut self, bytes: u64, node: &Node, path: &Path, rel: &str) {
        self.succeeded();
        self.summary.bytes += bytes;
        self.summary.files += 1;
        self.repo.progress.add_file();
        self.apply_meta(path, node, rel);
    }

    fn apply_meta(&mut self, path: &Path, node: &Node, rel: &str) {
        for what in crate::fsmeta::apply(path, node) {
            self.summary.metadata_failed.push(format!("{rel}: {what}"));
        }
    }
}

/// Files of at most one chunk restored at once.
pub const SMALL_FILES_AT_ONCE: usize = 16;

/// Creates (or replaces) the regular file `path` with `node`'s content, sparse.
/// Files of `direct::DIRECT_MIN` bytes or more go through direct I/O where the file
/// system allows it. A file whose content then fails is removed, never left with part of
/// it; a file that could not be opened is left as it was (an in-place restore onto a file
/// it may not write must not delete it).
async fn new_file<B: Backend>(repo: &Repository<B>, node: &Node, path: &Path) -> Result<u64> {
    let link = unlink_symlink(path)?;
    let opened = open_new_file(node, path);
    if opened.is_err()
        && let Some(target) = link
    {
        let _ = std::os::unix::fs::symlink(target, path);
    }
    let written = match opened? {
        (f, true) => write_file_direct(repo, node, f, path).await,
        (f, false) => write_file(repo, node, &f, path, Holes::Skip).await,
    };
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// Creates or truncates `path` for [`new_file`]: with direct I/O (`true`) for a file of
/// `direct::DIRECT_MIN` bytes or more where the file system allows it.
fn open_new_file(node: &Node, path: &Path) -> Result<(File, bool)> {
    if node.size.is_some_and(|n| n >= crate::direct::DIRECT_MIN)
        && let Some(f) = crate::direct::create(path).map_err(|e| RepoError::io(path, e))?
    {
        return Ok((f, true));
    }
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(NO_FOLLOW)
        .open(path)
        .map_err(|e| RepoError::io(path, e))?;
    Ok((f, false))
}

/// `O_NOFOLLOW`: a restore opens the files it writes without following a symlink in their
/// place, which a target could hold (or another entry of the snapshot just made, on a
/// case-insensitive file system).
pub(crate) const NO_FOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits().cast_signed();

/// Removes a symlink where the snapshot puts a file or a directory. Restoring into a
/// target that has one (an in-place recovery, a second snapshot into the same directory)
/// would otherwise write through it, outside the target: `app/conf -> /etc` and a
/// snapshot's `app/conf/passwd`. Returns the removed link's target.
fn unlink_symlink(path: &Path) -> Result<Option<PathBuf>> {
    match std::fs::read_link(path) {
        Ok(target) => {
            std::fs::remove_file(path).map_err(|e| RepoError::io(path, e))?;
            Ok(Some(target))
        }
        Err(_) => Ok(None),
    }
}

/// Range GETs in flight while a file is restored: reads go through the gateway, so
/// overlapping them hides the round trips.
pub const FETCH_AHEAD: usize = 4;

/// Chunks that lie next to each other in a pack (a file's chunks usually do) are read with
/// one range GET of up to this many bytes: fewer requests for the gateway and the store.
/// Memory: `FETCH_AHEAD` times this, at most.
pub const FETCH_SPAN: u64 = 8 << 20;

/// A spawned task that is cancelled when dropped (a failed restore stops its fetches).
struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A file's content in order: `(0, Some(bytes))` for a chunk, `(n, None)` for `n` zeros.
/// Runs of chunks are fetched by [`Repository::read_run`], up to `FETCH_AHEAD` at a time,
/// each a task of its own so that responses keep streaming in while the caller writes.
fn fetch_ahead<B: Backend>(
    repo: &Repository<B>,
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
                        Err(e) => Err(RepoError::Storage(format!("fetch task: {e}"))),
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

/// Writes `n` zeros: a hole's bytes where the target cannot have holes.
fn write_zeros(out: &mut impl Write, n: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let mut left = n;
    while left > 0 {
        let len = usize::try_from(left).map_or(ZEROS.len(), |l| l.min(ZEROS.len()));
        out.write_all(&ZEROS[..len])?;
        left -= len as u64;
    }
    Ok(())
}

/// Writes `n` zeros at offset `at`.
fn write_zeros_at(file: &File, at: u64, n: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let mut done = 0;
    while done < n {
        let len = usize::try_from(n - done).map_or(ZEROS.len(), |l| l.min(ZEROS.len()));
        file.write_all_at(&ZEROS[..len], at + done)?;
        done += len as u64;
    }
    Ok(())
}

/// How a restore treats the zero stretches a backup did not store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holes {
    /// Seek over them: a new regular file gets holes (sparse).
    Skip,
    /// Write zeros: a block device or an existing file may hold old data there.
    WriteZeros,
}

/// Restores one file node into an open file or device, from its start.
async fn write_file<B: Backend>(
    repo: &Repository<B>,
    node: &Node,
    f: &File,
    path: &Path,
    holes: Holes,
) -> Result<u64> {
    // Writes run on the blocking pool, at their offsets, one at a time in order; the
    // runtime thread stays free to receive the chunks being fetched meanwhile.
    let file = Arc::new(f.try_clone().map_err(|e| RepoError::io(path, e))?);
    let write_at = |at: u64, data: Option<Bytes>, zeros: u64| {
        let file = file.clone();
        let path = path.to_path_buf();
        async move {
            tokio::task::spawn_blocking(move || match data {
                Some(d) => file.write_all_at(&d, at),
                None => write_zeros_at(&file, at, zeros),
            })
            .await
            .map_err(|e| RepoError::Storage(format!("write task: {e}")))?
            .map_err(|e| RepoError::io(&path, e))
        }
    };
    let mut pos = 0u64;
    let mut fetched = fetch_ahead(repo, node);
    while let Some(item) = fetched.next().await {
        match item? {
            (_, Some(data)) => {
                let len = data.len() as u64;
                write_at(pos, Some(data), 0).await?;
                pos += len;
                repo.progress.add_bytes(len);
            }
            (zero, None) => {
                if holes == Holes::WriteZeros {
                    write_at(pos, None, zero).await?;
                }
                pos += zero;
                repo.progress.add_bytes(zero);
            }
        }
    }
    if holes == Holes::Skip {
        // A trailing hole needs the length set explicitly.
        file.set_len(pos).map_err(|e| RepoError::io(path, e))?;
    }
    check_length(node, pos, path)?;
    Ok(pos)
}

/// Restores one file node into a file opened for direct I/O, holes where whole blocks
/// are zero.
async fn write_file_direct<B: Backend>(
    repo: &Repository<B>,
    node: &Node,
    f: File,
    path: &Path,
) -> Result<u64> {
    let mut w = crate::direct::DirectWriter::new(f);
    let mut pos = 0u64;
    let mut fetched = fetch_ahead(repo, node);
    while let Some(item) = fetched.next().await {
        let n = match item? {
            (_, Some(data)) => {
                w.push(&data).await.map_err(|e| RepoError::io(path, e))?;
                data.len() as u64
            }
            (zero, None) => {
                w.zeros(zero).await.map_err(|e| RepoError::io(path, e))?;
                zero
            }
        };
        pos += n;
        repo.progress.add_bytes(n);
    }
    w.finish(pos).await.map_err(|e| RepoError::io(path, e))?;
    check_length(node, pos, path)?;
    Ok(pos)
}

fn check_length(node: &Node, pos: u64, path: &Path) -> Result<()> {
    if node.size.is_some_and(|s| s != pos) {
        return Err(RepoError::corrupt(
            path.display().to_string(),
            "restored length differs from the snapshot",
        ));
    }
    Ok(())
}

/// Restores a single file node onto `path`: a block device (written in place, zeros
/// included) or a regular file (created or replaced, sparse). For `kura restore SNAP
/// /dev/...` and `kura restore SNAP image.raw` of a one-file snapshot.
///
/// # Errors
/// [`RepoError::Invalid`] for a node that is not a regular file (before `path` is
/// touched); storage and verification errors; a device smaller than the content; write
/// errors.
pub async fn restore_file<B: Backend>(
    repo: &Repository<B>,
    node: &Node,
    path: &Path,
) -> Result<u64> {
    use std::os::unix::fs::FileTypeExt as _;
    one_file(node)?;
    let is_device = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
    let f = OpenOptions::new()
        .write(true)
        .create(!is_device)
        .truncate(!is_device)
        .open(path)
        .map_err(|e| RepoError::io(path, e))?;
    let holes = if is_device {
        Holes::WriteZeros
    } else {
        Holes::Skip
    };
    repo.progress.set_total(node.size.unwrap_or(0));
    let n = write_file(repo, node, &f, path, holes).await?;
    f.sync_all().map_err(|e| RepoError::io(path, e))?;
    Ok(n)
}

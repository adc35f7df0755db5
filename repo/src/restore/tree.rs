//! Restoring a snapshot's trees onto a directory: which entries `include` selects, the
//! order they are written in (small files several at once), hard links, symlinks and
//! special files, metadata, and the failures a restore lists or gives up on.
//!
//! Every directory is entered by its open descriptor and every entry made by one name in
//! it, never by a path (`beneath.rs`): a directory swapped for a symlink while the restore
//! is inside it does not send the rest of the restore, or a directory's metadata, outside
//! the target.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use futures::StreamExt as _;
use rustix::fs::AtFlags;

use super::fetch::{TREES_AHEAD, Task, tree_ahead, tree_read};
use super::write::{new_file, unlink_symlink};
use crate::beneath::{OpenDir, open_dir_beneath};
use crate::error::{RepoError, Result};
use crate::include::Include;
use crate::repository::Repository;
use crate::storage::{FileType, Storage};
use crate::tree::{Node, NodeType, Tree};

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

/// One restore onto a directory: what it has written so far, and its run of failures.
pub(super) struct Restorer<'a, S: Storage> {
    repo: &'a Repository<S>,
    include: &'a Include,
    /// (dev, inode) of multiply-linked files already restored, and where: the directory
    /// relative to the target, and the name.
    links: HashMap<(u64, u64), (PathBuf, OsString)>,
    /// The target's top directory, open while the restore runs.
    root: Option<OpenDir>,
    /// Files whose content failed: their further hard-link names cannot be made.
    failed_files: HashSet<PathBuf>,
    summary: RestoreSummary,
    /// Entries failed since the last one restored.
    in_a_row: usize,
    /// How many of those, the last ones, were errors of the target itself.
    target_in_a_row: usize,
}

impl<'a, S: Storage> Restorer<'a, S> {
    /// A restore of the entries `include` selects, nothing written yet.
    pub(super) fn new(repo: &'a Repository<S>, include: &'a Include) -> Self {
        Self {
            repo,
            include,
            links: HashMap::new(),
            root: None,
            failed_files: HashSet::new(),
            summary: RestoreSummary::default(),
            in_a_row: 0,
            target_in_a_row: 0,
        }
    }

    /// Restores the root tree `tree` into `target` (which exists).
    pub(super) async fn run(mut self, tree: Tree, target: &Path) -> Result<RestoreSummary> {
        let top = OpenDir::top(target).map_err(|e| RepoError::io(target, e))?;
        // The same directory, not the path opened again (it may name another by now).
        let fd = top.fd.try_clone().map_err(|e| RepoError::io(target, e))?;
        self.root = Some(OpenDir {
            fd,
            path: top.path.clone(),
        });
        self.dir(tree, &top, "", false).await?;
        Ok(self.summary)
    }

    /// Restores the entries of one directory: all of them when `inside` (the directory
    /// itself was selected), else those `include` selects. Returns whether it wrote any.
    /// An error is an abort ([`Restorer::failed`]); entries that fail are listed.
    async fn dir(&mut self, tree: Tree, dir: &OpenDir, rel: &str, inside: bool) -> Result<bool> {
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
            let rel = if rel.is_empty() {
                String::from_utf8_lossy(name.as_bytes()).into_owned()
            } else {
                format!("{rel}/{}", String::from_utf8_lossy(name.as_bytes()))
            };
            let matched = inside || self.include.matches(&rel);
            if node.kind == Some(NodeType::Dir) {
                if matched || self.include.may_contain(&rel) {
                    subdirs.push((node, name, rel, matched));
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
                            links.push((first.clone(), name, rel));
                            continue;
                        }
                        let here = self.relative(dir);
                        self.links.insert(key, (here, name.clone()));
                    }
                    if node.content.as_ref().is_some_and(|c| c.len() > 1) {
                        large.push((node, name, rel));
                    } else {
                        small.push((node, name, rel));
                    }
                }
                _ => match self.link_or_special(node, dir, &name, &rel) {
                    Ok(()) => self.succeeded(),
                    Err(e) => self.failed(&rel, e).await?,
                },
            }
        }

        // The subdirectories' trees are read while this directory's files are written,
        // `TREES_AHEAD` at a time.
        let (repo, trees) = (
            self.repo,
            subdirs.iter().map(|s| s.0.subtree).collect::<Vec<_>>(),
        );
        let mut ahead = std::collections::VecDeque::new();
        let mut next = 0;
        let mut read_ahead = |ahead: &mut std::collections::VecDeque<_>| {
            while ahead.len() < TREES_AHEAD && next < trees.len() {
                ahead.push_back(trees[next].map(|id| tree_ahead(repo, id)));
                next += 1;
            }
        };
        read_ahead(&mut ahead);
        self.write_files(dir, small, large, links).await?;
        for (node, name, rel, matched) in subdirs {
            let tree = ahead.pop_front().flatten();
            read_ahead(&mut ahead);
            // A directory entered only because a pattern may match below it is removed
            // again when nothing did (unless it was there before), and a symlink that stood
            // in its place is put back.
            let (link, existed, tree, sub) = match self.enter(tree, dir, &name).await {
                Ok(entered) => entered,
                Err(e) => {
                    self.failed(&rel, e).await?;
                    continue;
                }
            };
            let below = match tree {
                Some(tree) => Box::pin(self.dir(tree, &sub, &rel, matched)).await?,
                None => false,
            };
            if matched || below {
                wrote = true;
                self.summary.dirs += 1;
                // Through the directory's descriptor: its name may be a symlink by now.
                let failed = crate::fsmeta::apply_fd(sub.fd(), node);
                self.meta_failed(failed, &rel);
            } else if !existed {
                drop(sub);
                let _ = rustix::fs::unlinkat(dir.fd(), &name, AtFlags::REMOVEDIR);
                if let Some(target) = link
                    && let Err(e) = rustix::fs::symlinkat(&target, dir.fd(), &name)
                {
                    let e = RepoError::io(&dir.display(&name), e.into());
                    self.failed(&format!("{rel} (the symlink that was there)"), e)
                        .await?;
                }
            }
        }
        Ok(wrote)
    }

    /// Writes a directory's regular files: those of at most one chunk together, pack by
    /// pack (`batch.rs`: a tree of small files would otherwise wait on one round trip per
    /// file); larger ones one at a time, with `FETCH_AHEAD` runs of chunks in flight; then
    /// the further names of hard-linked files. Memory: `FETCH_AHEAD * FETCH_SPAN` bytes, and
    /// `SMALL_FILES_AT_ONCE` chunks, at most.
    async fn write_files(
        &mut self,
        dir: &OpenDir,
        small: Vec<(&Node, OsString, String)>,
        large: Vec<(&Node, OsString, String)>,
        links: Vec<((PathBuf, OsString), OsString, String)>,
    ) -> Result<()> {
        let repo = self.repo;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut done = Box::pin(super::batch::small_files(repo, dir, small, &stop));
        // Giving up starts no further file and waits for those in flight: each either
        // finishes or removes itself, so none is left with part of its content.
        let mut gave_up = None;
        while let Some((n, path, rel)) = done.next().await {
            match n {
                Ok(n) => self.file_done(n, &rel),
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
        for (node, name, rel) in large {
            let path = dir.display(&name);
            match new_file(repo, node, dir.fd(), &name, &path).await {
                Ok(n) => self.file_done(n, &rel),
                Err(e) => self.file_failed(path, &rel, e).await?,
            }
        }
        for ((first_dir, first_name), name, rel) in links {
            let path = dir.display(&name);
            let first = self.target_path(&first_dir).join(&first_name);
            if self.failed_files.contains(&first) {
                // Listed, but not another failure of the storage: the first name's was.
                self.summary.failed.push(format!(
                    "{rel}: a hard link of {}, which could not be restored",
                    first.display()
                ));
                continue;
            }
            match self.hard_link(&first_dir, &first_name, dir, &name) {
                Ok(()) => {
                    self.summary.files += 1;
                    self.succeeded();
                }
                Err(e) => self.failed(&rel, RepoError::io(&path, e)).await?,
            }
        }
        Ok(())
    }

    /// Makes `name` in `dir` another name of the file restored as `first_name` in the
    /// directory `first_dir` (relative to the target), which is looked up again below the
    /// target without following a symlink.
    fn hard_link(
        &self,
        first_dir: &Path,
        first_name: &OsStr,
        dir: &OpenDir,
        name: &OsStr,
    ) -> std::io::Result<()> {
        let root = self.root.as_ref().expect("set while the restore runs");
        let first = open_dir_beneath(root.fd(), first_dir)?;
        let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty());
        rustix::fs::linkat(&first, first_name, dir.fd(), name, AtFlags::empty())?;
        Ok(())
    }

    /// Where the open directory `dir` is relative to the target's top, by the names the
    /// restore entered.
    fn relative(&self, dir: &OpenDir) -> PathBuf {
        let root = self.root.as_ref().expect("set while the restore runs");
        dir.path
            .strip_prefix(&root.path)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// The path of `rel` (relative to the target), for messages and the failed files.
    fn target_path(&self, rel: &Path) -> PathBuf {
        let root = self.root.as_ref().expect("set while the restore runs");
        root.path.join(rel)
    }

    /// Takes a directory node's tree (being read by `tree`), then makes its directory
    /// `name` in `dir` and opens it: returns the target's symlink set aside there, whether
    /// a directory was there, the tree, and the open directory.
    async fn enter(
        &self,
        tree: Option<Task<Result<Tree>>>,
        dir: &OpenDir,
        name: &OsStr,
    ) -> Result<(Option<PathBuf>, bool, Option<Tree>, OpenDir)> {
        let tree = match tree {
            Some(task) => Some(tree_read(task).await?),
            None => None,
        };
        let path = dir.display(name);
        let link = unlink_symlink(dir.fd(), name, &path)?;
        let existed = rustix::fs::statat(dir.fd(), name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir());
        let made = match rustix::fs::mkdirat(dir.fd(), name, rustix::fs::Mode::from_raw_mode(0o700))
        {
            Err(rustix::io::Errno::EXIST) if existed => Ok(()),
            other => other,
        };
        let opened = made
            .map_err(std::io::Error::from)
            .and_then(|()| dir.child(name));
        match opened {
            Ok(sub) => Ok((link, existed, tree, sub)),
            Err(e) => {
                if let Some(target) = &link {
                    let _ = rustix::fs::symlinkat(target, dir.fd(), name);
                }
                Err(RepoError::io(&path, e))
            }
        }
    }

    /// A symlink, device node, FIFO or socket, as `name` in `dir`.
    fn link_or_special(
        &mut self,
        node: &Node,
        dir: &OpenDir,
        name: &OsStr,
        rel: &str,
    ) -> Result<()> {
        let path = dir.display(name);
        match node.kind {
            Some(NodeType::Symlink) => {
                let target = hex::decode(node.target_hex.as_deref().unwrap_or_default())
                    .map_err(|e| RepoError::corrupt("tree", e))?;
                let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty());
                rustix::fs::symlinkat(OsStr::from_bytes(&target), dir.fd(), name)
                    .map_err(|e| RepoError::io(&path, e.into()))?;
                self.summary.symlinks += 1;
                let failed = crate::fsmeta::apply_at(dir.fd(), name, node);
                self.meta_failed(failed, rel);
            }
            Some(NodeType::Chardev | NodeType::Blockdev | NodeType::Fifo | NodeType::Socket) => {
                match crate::fsmeta::make_special(dir.fd(), name, node) {
                    Ok(()) => {
                        self.summary.special += 1;
                        let failed = crate::fsmeta::apply_at(dir.fd(), name, node);
                        self.meta_failed(failed, rel);
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
                || self.repo.storage().get(FileType::Config, "").await.is_err()
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

    /// A regular file written, with the metadata [`new_file`] could not apply.
    fn file_done(&mut self, (bytes, meta_failed): (u64, Vec<String>), rel: &str) {
        self.succeeded();
        self.summary.bytes += bytes;
        self.summary.files += 1;
        self.repo.progress.add_file();
        self.meta_failed(meta_failed, rel);
    }

    fn meta_failed(&mut self, failed: Vec<String>, rel: &str) {
        for what in failed {
            self.summary.metadata_failed.push(format!("{rel}: {what}"));
        }
    }
}

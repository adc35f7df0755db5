//! Restoring a snapshot's trees onto a directory: which entries `include` selects, the
//! order they are written in (small files several at once), hard links, symlinks and
//! special files, metadata, and the failures a restore lists or gives up on.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use futures::StreamExt as _;

use super::write::{new_file, unlink_symlink};
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

/// Files of at most one chunk restored at once.
pub const SMALL_FILES_AT_ONCE: usize = 16;

/// One restore onto a directory: what it has written so far, and its run of failures.
pub(super) struct Restorer<'a, S: Storage> {
    repo: &'a Repository<S>,
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

impl<'a, S: Storage> Restorer<'a, S> {
    /// A restore of the entries `include` selects, nothing written yet.
    pub(super) fn new(repo: &'a Repository<S>, include: &'a Include) -> Self {
        Self {
            repo,
            include,
            links: HashMap::new(),
            failed_files: HashSet::new(),
            summary: RestoreSummary::default(),
            in_a_row: 0,
            target_in_a_row: 0,
        }
    }

    /// Restores the root tree `tree` into `target` (which exists).
    pub(super) async fn run(mut self, tree: Tree, target: &Path) -> Result<RestoreSummary> {
        self.dir(tree, target, "", false).await?;
        Ok(self.summary)
    }

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

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
use std::sync::Arc;

use futures::StreamExt as _;
use rustix::fs::AtFlags;

use super::batch::{Dir, FILES_QUEUED, File, is_small};
use super::tally::Tally;
use super::unfinished::{Naming, UNFINISHED, Unfinished, remove_leftovers};
use super::write::{make_over, new_file, unlink_symlink};
use crate::beneath::{OpenDir, open_dir_beneath};
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::include::Include;
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::{Depth, Node, NodeType, Tree};
use crate::trees_ahead::TreesAhead;

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
    /// A file that failed is removed, never left with part of its content; one that cannot
    /// be removed either is listed as left short, and the target's marker stays.
    pub failed: Vec<String>,
}

/// Entries that may fail one after another before a restore asks whether the storage still
/// serves the repository (one GET of its `config`). Damage fails entries in long runs too
/// (small files share packs), so the run alone decides nothing: the restore gives up only
/// when that GET fails as well, which is an outage, and otherwise goes on.
pub const FAILURES_IN_A_ROW: usize = 16;

/// Restores the root tree `tree` into `target` (which exists): the walk below makes
/// directories, links and special files and writes large files, while the small files it
/// queues are written by `batch.rs` at the same time.
pub(super) async fn restore_tree<S: Storage>(
    repo: &Repository<S>,
    include: &Include,
    root_tree: &Id,
    tree: Tree,
    target: &Path,
) -> Result<RestoreSummary> {
    let top = OpenDir::top(target).map_err(|e| RepoError::io(target, e))?;
    // The same directory, not the path opened again (it may name another by now).
    let fd = top.fd.try_clone().map_err(|e| RepoError::io(target, e))?;
    let root = OpenDir {
        fd,
        path: top.path.clone(),
    };
    let unfinished = Unfinished::mark(top.fd(), root_tree, include.is_all());
    let naming = Naming {
        own: unfinished.as_ref().map(Unfinished::hold),
        tag: unfinished.as_ref().map_or(0, Unfinished::entry),
    };
    let tag = naming.tag;
    let leftovers = unfinished
        .as_ref()
        .map(Unfinished::stopped)
        .unwrap_or_default();
    let root_fd = top.fd.try_clone().map_err(|e| RepoError::io(target, e))?;
    let tally = Tally::new(repo);
    let (queue, queued) = tokio::sync::mpsc::channel(FILES_QUEUED);
    let walk = async {
        let mut restorer = Restorer {
            repo,
            include,
            links: HashMap::new(),
            root,
            tally: &tally,
            queue,
            tag,
            leftovers,
        };
        if let Err(e) = restorer.walk(tree, Dir::new(top)).await {
            tally.give_up(e);
        }
        // The queue closes with the restorer: the writers finish what is queued.
    };
    let write = async {
        let mut done = std::pin::pin!(super::batch::small_files(repo, queued, &tally.stop, naming));
        while let Some(done) = done.next().await {
            tally.queued_done(done).await;
        }
    };
    // Boxed: the walk's state is large, and a caller's future need not hold it.
    futures::join!(Box::pin(walk), Box::pin(write));
    // Every file is whole or removed now, unless a writer was lost on the way or a failed
    // file could not be removed: then the restore counts as stopped, and the marker stays.
    if let Some(unfinished) = unfinished
        && !tally.left_short()
    {
        let wrote_all = include.is_all() && tally.wrote_every_entry();
        unfinished.finished(std::os::fd::AsFd::as_fd(&root_fd), wrote_all);
    }
    tally.finish()
}

/// The walk of one restore onto a directory.
struct Restorer<'a, S: Storage> {
    repo: &'a Repository<S>,
    include: &'a Include,
    /// (dev, inode) of multiply-linked files already restored, and where: the directory
    /// relative to the target, and the name.
    links: HashMap<(u64, u64), (PathBuf, OsString)>,
    /// The target's top directory.
    root: OpenDir,
    tally: &'a Tally<'a, S>,
    /// Small files for `batch.rs`.
    queue: tokio::sync::mpsc::Sender<File>,
    /// The tag of its temporary names (`unfinished::Naming`): the walk's files are all
    /// written under temporary names, renamed into place by the walk itself.
    tag: u64,
    /// The marker's entries of restores that had stopped when this one began: their
    /// temporary files are removed from each directory this one restores.
    leftovers: HashSet<u64>,
}

/// A directory the walk is inside ([`Restorer::walk`]).
struct Level<S: Storage> {
    /// Its tree: its subdirectories are entered by their index in it.
    tree: Tree,
    dir: Arc<Dir>,
    /// The subdirectories still to enter, each with its position among them: index in
    /// `tree`, path from the target, whether selected whole.
    subdirs: std::iter::Enumerate<std::vec::IntoIter<(usize, String, bool)>>,
    /// Their trees, read ahead.
    ahead: TreesAhead<S>,
    /// Whether anything was written in it so far (its files, or below).
    wrote: bool,
    /// Where it lies below the target (levels, and path bytes as named, not as shown).
    depth: Depth,
    /// How it was entered: `None` for the target's top.
    entered: Option<Entered>,
}

/// How a directory was entered, for [`Restorer::leave`].
struct Entered {
    /// Its node's index in the tree above.
    at: usize,
    /// Its path from the target.
    rel: String,
    /// Whether it was selected whole.
    matched: bool,
    /// The symlink that stood at its name, set aside.
    link: Option<PathBuf>,
    /// Whether a directory was there before.
    existed: bool,
}

/// What the walk returns when the writers gave up (their reason is the restore's error).
fn gave_up() -> RepoError {
    RepoError::Invalid("the restore gave up".into())
}

impl<S: Storage> Restorer<'_, S> {
    /// Restores the tree `tree` into the target's top directory `top`: each directory's
    /// files, then its subdirectories one after another, depth first, each directory's
    /// metadata once it is left. A loop over the directories the walk is inside, not a
    /// recursion: a tree may nest `MAX_DEPTH` levels, and each level would be stack
    /// frames (about 120 KiB of them in a debug build) and one more poll on every wake-up.
    /// Returns whether it wrote any entry. An error is an abort ([`Tally::failed`]);
    /// entries that fail are listed.
    async fn walk(&mut self, tree: Tree, top: Arc<Dir>) -> Result<bool> {
        let mut above: Vec<Level<S>> = Vec::new();
        let mut level = self
            .level(tree, (top, Depth::default()), "", false, None)
            .await?;
        loop {
            if let Some((at, (i, rel, matched))) = level.subdirs.next() {
                let tree = level.ahead.tree_at(at).await;
                if let Some(sub) = self.enter_level(&level, (i, rel, matched), tree).await? {
                    above.push(std::mem::replace(&mut level, sub));
                }
                continue;
            }
            let Some(entered) = level.entered.take() else {
                return Ok(level.wrote);
            };
            let mut parent = above.pop().expect("an entered level has one above it");
            parent.wrote |= self.leave(&parent, level, entered).await?;
            level = parent;
        }
    }

    /// A directory's level: its files queued or written (all of them when `inside`, the
    /// directory itself selected, else those `include` selects), its subdirectories' trees
    /// read ahead.
    async fn level(
        &mut self,
        tree: Tree,
        (dir, depth): (Arc<Dir>, Depth),
        rel: &str,
        inside: bool,
        entered: Option<Entered>,
    ) -> Result<Level<S>> {
        if self.tally.stopped() {
            return Err(gave_up());
        }
        let (subdirs, ahead, wrote) = match tree.check_names() {
            Ok(()) => self.entries(&tree, &dir, rel, inside).await?,
            Err(why) => {
                let e = RepoError::corrupt("tree", format!("{why} in {rel:?}"));
                self.tally.failed(rel, e).await?;
                (Vec::new(), TreesAhead::new(self.repo, Vec::new()), false)
            }
        };
        Ok(Level {
            ahead,
            subdirs: subdirs.into_iter().enumerate(),
            tree,
            dir,
            wrote,
            depth,
            entered,
        })
    }

    /// The entries of a directory's tree (whose names checked), for [`Restorer::level`]:
    /// returns its subdirectories to enter (index in `tree`, path from the target,
    /// whether selected whole), their trees being read ahead, and whether it wrote any.
    async fn entries(
        &mut self,
        tree: &Tree,
        dir: &Arc<Dir>,
        rel: &str,
        inside: bool,
    ) -> Result<(Vec<(usize, String, bool)>, TreesAhead<S>, bool)> {
        let mut wrote = false;
        let mut subdirs = Vec::new();
        if !self.leftovers.is_empty() {
            remove_leftovers(dir.open.fd(), &self.leftovers);
        }
        // Directories are entered after this directory's files are queued, and get their
        // metadata last (writing into a directory changes its mtime).
        let mut small = Vec::new();
        let mut large = Vec::new();
        let mut links = Vec::new();
        for (i, node) in tree.nodes.iter().enumerate() {
            let name = node.name();
            let rel = if rel.is_empty() {
                String::from_utf8_lossy(name.as_bytes()).into_owned()
            } else {
                format!("{rel}/{}", String::from_utf8_lossy(name.as_bytes()))
            };
            let matched = inside || self.include.matches(&rel);
            if rel == UNFINISHED {
                // The marker's name: whatever a snapshot holds there would replace it.
                if matched {
                    let why = "not restored: kura keeps its restore marker under this name";
                    self.tally
                        .summary(|s| s.skipped.push(format!("{rel}: {why}")));
                }
                continue;
            }
            if node.kind == Some(NodeType::Dir) {
                if matched || self.include.may_contain(&rel) {
                    subdirs.push((i, rel, matched));
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
                        let here = self.relative(&dir.open);
                        self.links.insert(key, (here, name.clone()));
                    }
                    if is_small(node) {
                        small.push((node, name, rel));
                    } else {
                        large.push((node, name, rel));
                    }
                }
                _ => match self.link_or_special(node, &dir.open, &name, &rel) {
                    Ok(()) => self.tally.succeeded(),
                    Err(e) => self.tally.failed(&rel, e).await?,
                },
            }
        }
        // The subdirectories' trees are read while this directory's files are written.
        let ahead = TreesAhead::new(
            self.repo,
            subdirs
                .iter()
                .map(|(i, ..)| tree.nodes[*i].subtree)
                .collect(),
        );
        self.write_files(dir, small, large, links).await?;
        Ok((subdirs, ahead, wrote))
    }

    /// Enters the subdirectory `i` of `parent`'s tree (`rel` from the target; all of it
    /// when `matched`), whose tree was read ahead as `tree`: its level, or `None` when it
    /// could not be entered (listed as failed; also beyond [`crate::MAX_DEPTH`] and
    /// [`crate::MAX_PATH_BYTES`], as [`Depth`] counts).
    async fn enter_level(
        &mut self,
        parent: &Level<S>,
        (i, rel, matched): (usize, String, bool),
        tree: Option<Result<Tree>>,
    ) -> Result<Option<Level<S>>> {
        let name = parent.tree.nodes[i].name();
        let depth = match parent.depth.below(name.as_bytes()) {
            Ok(depth) => depth,
            Err(why) => {
                let e = RepoError::Invalid(format!("{why}: not restored"));
                self.tally.failed(&rel, e).await?;
                return Ok(None);
            }
        };
        let (link, existed, tree, sub) = match Self::enter(tree, &parent.dir.open, &name) {
            Ok(entered) => entered,
            Err(e) => {
                self.tally.failed(&rel, e).await?;
                return Ok(None);
            }
        };
        let entered = Entered {
            at: i,
            rel: rel.clone(),
            matched,
            link,
            existed,
        };
        // A directory node without a tree restores as an empty directory.
        let tree = tree.unwrap_or_default();
        self.level(tree, (Dir::new(sub), depth), &rel, matched, Some(entered))
            .await
            .map(Some)
    }

    /// Leaves the directory of `level`, entered from `parent` as `entered`: its metadata
    /// (once the last of its files queued is written), or, when it was entered only
    /// because a pattern may match below it and nothing did, it is removed again (unless
    /// it was there before) and a symlink that stood in its place is put back. Returns
    /// whether anything was written there.
    async fn leave(
        &mut self,
        parent: &Level<S>,
        level: Level<S>,
        entered: Entered,
    ) -> Result<bool> {
        let node = &parent.tree.nodes[entered.at];
        let Level {
            dir: sub,
            wrote: below,
            ahead,
            ..
        } = level;
        drop(ahead);
        if entered.matched || below {
            self.tally.summary(|s| s.dirs += 1);
            // Through the directory's descriptor (its name may be a symlink by now), once
            // the last of its files queued is written.
            if let Some((node, rel)) = sub.walk_left(node, &entered.rel) {
                let failed = crate::fsmeta::apply_fd(sub.open.fd(), &node);
                self.tally.meta_failed(failed, &rel);
            }
            return Ok(true);
        }
        if !entered.existed {
            // Nothing was queued for it: no file below was selected.
            drop(sub);
            let name = node.name();
            let _ = rustix::fs::unlinkat(parent.dir.open.fd(), &name, AtFlags::REMOVEDIR);
            if let Some(target) = entered.link
                && let Err(e) = rustix::fs::symlinkat(&target, parent.dir.open.fd(), &name)
            {
                let e = RepoError::io(&parent.dir.open.display(&name), e.into());
                self.tally
                    .failed(&format!("{} (the symlink that was there)", entered.rel), e)
                    .await?;
            }
        }
        Ok(false)
    }

    /// Writes a directory's regular files: those of at most one chunk are queued for
    /// `batch.rs` (a tree of small files would otherwise wait on one round trip per
    /// file); larger ones one at a time here, with `FETCH_AHEAD` runs of chunks in flight;
    /// then the further names of hard-linked files, once every file queued is written.
    /// Memory: `FETCH_AHEAD * FETCH_SPAN` bytes here and as much in `batch.rs`, and
    /// `FILES_QUEUED` nodes, at most.
    async fn write_files(
        &mut self,
        dir: &Arc<Dir>,
        small: Vec<(&Node, OsString, String)>,
        large: Vec<(&Node, OsString, String)>,
        links: Vec<((PathBuf, OsString), OsString, String)>,
    ) -> Result<()> {
        for (node, name, rel) in small {
            if self.tally.stopped() {
                return Err(gave_up());
            }
            dir.file_queued();
            self.tally.queued();
            let file = File {
                node: node.clone(),
                name,
                rel,
                dir: dir.clone(),
            };
            if self.queue.send(file).await.is_err() {
                return Err(gave_up());
            }
        }
        let repo = self.repo;
        for (node, name, rel) in large {
            let path = dir.open.display(&name);
            match new_file(repo, node, dir.open.fd(), &name, &path, self.tag).await {
                Ok(n) => self.tally.file_done(n, &rel),
                Err(e) => self.tally.file_failed(path, &rel, e).await?,
            }
        }
        if links.is_empty() {
            return Ok(());
        }
        // A first name may still be queued.
        self.tally.drained().await;
        if self.tally.stopped() {
            return Err(gave_up());
        }
        for ((first_dir, first_name), name, rel) in links {
            let path = dir.open.display(&name);
            let first = self.target_path(&first_dir).join(&first_name);
            if self.tally.file_has_failed(&first) {
                // Listed, but not another failure of the storage: the first name's was.
                self.tally.summary(|s| {
                    s.failed.push(format!(
                        "{rel}: a hard link of {}, which could not be restored",
                        first.display()
                    ));
                });
                continue;
            }
            match self.hard_link(&first_dir, &first_name, &dir.open, &name) {
                Ok(()) => {
                    self.tally.summary(|s| s.files += 1);
                    self.tally.succeeded();
                }
                Err(e) => self.tally.failed(&rel, RepoError::io(&path, e)).await?,
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
        let first = open_dir_beneath(self.root.fd(), first_dir)?;
        make_over(dir.fd(), name, self.tag, |temp| {
            rustix::fs::linkat(&first, first_name, dir.fd(), temp, AtFlags::empty())
                .map_err(Into::into)
        })
    }

    /// Where the open directory `dir` is relative to the target's top, by the names the
    /// restore entered.
    fn relative(&self, dir: &OpenDir) -> PathBuf {
        dir.path
            .strip_prefix(&self.root.path)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// The path of `rel` (relative to the target), for messages and the failed files.
    fn target_path(&self, rel: &Path) -> PathBuf {
        self.root.path.join(rel)
    }

    /// Takes a directory node's tree (as read ahead: `tree`), then makes its directory
    /// `name` in `dir` and opens it: returns the target's symlink set aside there, whether
    /// a directory was there, the tree, and the open directory.
    fn enter(
        tree: Option<Result<Tree>>,
        dir: &OpenDir,
        name: &OsStr,
    ) -> Result<(Option<PathBuf>, bool, Option<Tree>, OpenDir)> {
        let tree = tree.transpose()?;
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
                make_over(dir.fd(), name, self.tag, |temp| {
                    rustix::fs::symlinkat(OsStr::from_bytes(&target), dir.fd(), temp)
                        .map_err(Into::into)
                })
                .map_err(|e| RepoError::io(&path, e))?;
                self.tally.summary(|s| s.symlinks += 1);
                let failed = crate::fsmeta::apply_at(dir.fd(), name, node);
                self.tally.meta_failed(failed, rel);
            }
            Some(NodeType::Chardev | NodeType::Blockdev | NodeType::Fifo | NodeType::Socket) => {
                let made = make_over(dir.fd(), name, self.tag, |temp| {
                    crate::fsmeta::make_special(dir.fd(), temp, node)
                });
                match made {
                    Ok(()) => {
                        self.tally.summary(|s| s.special += 1);
                        let failed = crate::fsmeta::apply_at(dir.fd(), name, node);
                        self.tally.meta_failed(failed, rel);
                    }
                    Err(e) => self
                        .tally
                        .summary(|s| s.skipped.push(format!("{rel}: {e}"))),
                }
            }
            _ => self
                .tally
                .summary(|s| s.skipped.push(format!("{rel}: no type"))),
        }
        Ok(())
    }
}

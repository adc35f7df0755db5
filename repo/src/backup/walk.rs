//! Walking what a backup reads: the sources (paths, a stream, a device), directories in
//! name order, and each entry's metadata, xattrs and content, into the trees of the
//! snapshot. Files that match their parent snapshot's record keep its content unread,
//! unless the record was taken too close to a change for its timestamps to tell; files
//! that change while they are read are read again, then flagged; entries that cannot be
//! read are recorded as errors, not fatal. Below each source path, every entry is looked
//! up by its name in its open directory (`beneath.rs`), so a directory swapped for a
//! symlink during the walk is not followed.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

use super::block::{BlockOptions, ParentBlock};
use super::chunk::Chunker;
use super::command::Child;
use super::meta::Meta;
use super::packer::Packer;
use super::read::{Entry, open_as_listed, read_checked, top_dir, xattr_path};
use crate::beneath::OpenDir;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::snapshot::Summary;
use crate::storage::Storage;
use crate::tree::{Content, Node, NodeType, Tree};
use crate::trees_ahead::TreesAhead;

/// How close to its parent backup's start a file's mtime or ctime may be and the file
/// still be taken as unchanged, in ns: the coarsest timestamp step of a file system kura
/// may read (FAT's 2 s; ext4, XFS, btrfs and tmpfs step by a clock tick), so that a write
/// in the tick in which the parent read the file cannot hide (FORMAT.md section 9).
const RACY_MARGIN_NS: i128 = 2_000_000_000;

/// The parent snapshot a backup compares files with.
pub(super) struct Parent {
    /// Its root tree.
    pub(super) root: Tree,
    /// When it started (its `time`); `None` when that does not parse, and then no file is
    /// taken from it unread.
    pub(super) started: Option<time::OffsetDateTime>,
    /// Whether it recorded every node's xattrs (its `xattrs_recorded`).
    pub(super) xattrs_recorded: bool,
    /// What it read, if it is a block backup.
    pub(super) block: Option<crate::snapshot::BlockRecord>,
    /// Whether it read everything, was not repaired and read nothing that changed while it
    /// was read (no `incomplete`, `errors` or `changed_during_backup`): what a repair lost
    /// is holes in it, and a torn image's blocks may be wrong, either of which a
    /// `--changed` run would keep.
    pub(super) whole: bool,
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
    /// A command's standard output, stored as one file called `name`, as `Stdin` is; the
    /// snapshot is written only if the command exits 0 once its output ended (its
    /// standard error passes through to this process's).
    Command {
        /// The file name in the snapshot.
        name: String,
        /// The program and its arguments.
        argv: Vec<std::ffi::OsString>,
    },
    /// A block device or image file, cut into fixed chunks; zero chunks become holes.
    Block(PathBuf),
}

/// The file node of a stream called `name`, before its content is read: a restore to a
/// directory refuses an entry named `a/b` or nothing, so the backup refuses it first.
fn stream_node(name: &str) -> Result<Node> {
    let mut node = Node {
        kind: Some(NodeType::File),
        mode: 0o644,
        mtime: now_ns(),
        links: 1,
        ..Node::default()
    };
    node.set_name(std::ffi::OsStr::new(name));
    if !node.name_is_safe() {
        return Err(RepoError::Invalid(format!(
            "the stream's name {name:?} is not a plain file name (no `/`, not empty)"
        )));
    }
    Ok(node)
}

/// Lists the sources and builds their trees, reading files through the chunker into the
/// packer.
pub(super) struct Walker<S: Storage> {
    /// Where every blob goes.
    pub(super) packer: Packer<S>,
    pub(super) chunker: Chunker,
    /// Counts of what was read (the packer counts what was stored).
    pub(super) summary: Summary,
    /// What could not be read, as `path: why`.
    errors: Vec<String>,
    /// The files that changed at every reading.
    changed: Vec<String>,
    /// Files whose parent record has an mtime or ctime at or after this (ns since the
    /// epoch) are read again; `None`: every file is.
    trusted_before: Option<i128>,
    /// Whether the parent recorded every node's xattrs (its `xattrs_recorded`): then an
    /// unchanged file takes its parent's.
    parent_xattrs: bool,
    /// Whether every node's xattrs are recorded so far: a tree backup with no failed read
    /// of them (FORMAT.md 8.3 `xattrs_recorded`).
    xattrs_recorded: bool,
    /// What a `--block` backup read, for its snapshot.
    pub(super) block: Option<crate::snapshot::BlockRecord>,
    /// Per directory level the walk is inside, the parent's subtrees of that directory
    /// being read ahead, and the first position of each tree ID among them.
    ahead: Vec<(TreesAhead<S>, HashMap<Id, usize>)>,
}

impl<S: Storage> Walker<S> {
    /// A walker storing through `packer`.
    pub(super) fn new(packer: Packer<S>) -> Result<Self> {
        Ok(Self {
            packer,
            chunker: Chunker::new()?,
            summary: Summary::default(),
            errors: Vec::new(),
            changed: Vec::new(),
            trusted_before: None,
            parent_xattrs: false,
            xattrs_recorded: false,
            block: None,
            ahead: Vec::new(),
        })
    }

    /// The snapshot's counts so far, the packer's included; taken, leaving zeros.
    pub(super) fn take_summary(&mut self) -> Summary {
        let added = self.packer.added();
        Summary {
            blobs_added: added.blobs,
            bytes_added: added.bytes,
            bytes_stored: added.stored,
            ..std::mem::take(&mut self.summary)
        }
    }

    /// What could not be read, taken.
    pub(super) fn take_errors(&mut self) -> Vec<String> {
        std::mem::take(&mut self.errors)
    }

    /// Flags `node`, the file at `path`, as changed while it was read (FORMAT.md 8.2,
    /// `changed_during_backup`), and lists it in the snapshot.
    pub(super) fn flag_changed(&mut self, node: &mut Node, path: &Path) {
        node.changed_during_backup = true;
        self.changed.push(path.display().to_string());
        self.summary.files_changed_during_backup += 1;
    }

    /// The files that changed at every reading, taken.
    pub(super) fn take_changed(&mut self) -> Vec<String> {
        std::mem::take(&mut self.changed)
    }

    /// Whether something could not be read.
    pub(super) fn incomplete(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Whether every node's xattrs are what the file system listed, for the snapshot.
    pub(super) fn xattrs_recorded(&self) -> bool {
        self.xattrs_recorded
    }

    /// Stores `source` (beside its `parent` snapshot's root tree, if any); returns the
    /// root tree's ID and the paths for the snapshot.
    pub(super) fn source(
        &mut self,
        source: Source,
        parent: Option<&Parent>,
        block: &BlockOptions,
    ) -> Result<(Id, Vec<std::ffi::OsString>)> {
        self.trusted_before = parent
            .and_then(|p| p.started)
            .map(|t| t.unix_timestamp_nanos() - RACY_MARGIN_NS);
        self.parent_xattrs = parent.is_some_and(|p| p.xattrs_recorded);
        let block_parent = parent.map(|p| ParentBlock {
            record: p.block.as_ref(),
            whole: p.whole,
            node: match p.root.nodes.as_slice() {
                [node] => Some(node),
                _ => None,
            },
        });
        let parent = parent.map(|p| &p.root);
        let mut root = Tree::default();
        let mut paths = Vec::new();
        match source {
            Source::Paths(list) => {
                unique_top_names(&list)?;
                self.xattrs_recorded = true;
                for path in list {
                    paths.push(path.clone().into_os_string());
                    let name = top_name(&path);
                    let before = parent.and_then(|t| t.find(&name));
                    // The path's own last component is not followed, as below it.
                    let (dir, entry_name) = match top_dir(&path) {
                        Ok(found) => found,
                        Err(e) => {
                            self.errors.push(format!("{}: {e}", path.display()));
                            continue;
                        }
                    };
                    let entry = Entry {
                        dir: &dir,
                        name: &entry_name,
                        path: &path,
                    };
                    if let Some(node) = self.entry(&entry, &name, before)? {
                        root.nodes.push(node);
                    }
                }
            }
            Source::Stdin { name, reader } => {
                paths.push(format!("-:{name}").into());
                let node = stream_node(&name)?;
                root.nodes.push(self.stream(node, reader)?);
            }
            Source::Command { name, argv } => {
                paths.push(format!("-:{name}").into());
                // The name is checked before the command starts.
                let node = stream_node(&name)?;
                let mut child = Child::spawn(argv)?;
                let node = self.stream(node, child.stdout());
                // After the output's end and before the snapshot: a command that failed
                // leaves what it wrote indexed (the next run reuses it), and no snapshot.
                let ended = child.wait(node.is_err());
                let node = node?;
                if let Err(e) = ended {
                    self.packer.finish()?;
                    return Err(e);
                }
                root.nodes.push(node);
            }
            Source::Block(path) => {
                paths.push(path.clone().into_os_string());
                let node = self.block(&path, block_parent.as_ref(), block)?;
                root.nodes.push(node);
            }
        }
        root.sort();
        let id = self.packer.save_tree(&root)?;
        Ok((id, paths))
    }

    /// A stream's file `node` with its content, read from `reader`, stored.
    fn stream(&mut self, mut node: Node, reader: impl Read) -> Result<Node> {
        let (content, size) = self.cdc(reader, None)?;
        node.size = Some(size);
        node.content = Some(content);
        self.summary.files += 1;
        Ok(node)
    }

    /// The entry `at`, stored under `name`, or `None` when it could not be read (recorded
    /// as an error). A directory is opened by its name and its metadata taken from what
    /// was opened, so the directory listed is the one whose metadata is stored, whatever
    /// its name names by now.
    fn entry(
        &mut self,
        at: &Entry<'_>,
        name: &std::ffi::OsStr,
        before: Option<&Node>,
    ) -> Result<Option<Node>> {
        let looked = Meta::at(at.dir.fd(), at.name).and_then(|meta| {
            if !meta.is_dir() {
                return Ok((meta, None));
            }
            let fd = crate::beneath::open_dir(at.dir.fd(), at.name)?;
            let meta = Meta::of(fd.as_fd())?;
            let dir = OpenDir {
                fd,
                path: at.path.to_path_buf(),
            };
            Ok((meta, Some(dir)))
        });
        match looked {
            Ok((meta, dir)) => self.node(at, dir, name, &meta, before),
            Err(e) => {
                self.errors.push(format!("{}: {e}", at.path.display()));
                Ok(None)
            }
        }
    }

    /// One directory entry `at` whose metadata is `meta` (`dir`: the directory, opened,
    /// when it is one), or `None` when it could not be read (recorded as an error).
    fn node(
        &mut self,
        at: &Entry<'_>,
        dir: Option<OpenDir>,
        name: &std::ffi::OsStr,
        meta: &Meta,
        before: Option<&Node>,
    ) -> Result<Option<Node>> {
        let path = at.path;
        let kind = match meta.kind {
            FileType::Directory => NodeType::Dir,
            FileType::RegularFile => NodeType::File,
            FileType::Symlink => NodeType::Symlink,
            FileType::CharacterDevice => NodeType::Chardev,
            FileType::BlockDevice => NodeType::Blockdev,
            FileType::Fifo => NodeType::Fifo,
            _ => NodeType::Socket,
        };
        let mut node = node_from_meta(meta, kind);
        node.set_name(name);
        let unchanged = kind == NodeType::File && self.unchanged(&node, meta, before);
        // An unchanged file's xattrs are its parent's: setting or removing one moves the
        // ctime. Only from a parent that recorded them all: one written before xattrs were
        // recorded, or whose read of them failed, must not pass its lack on. Listing them
        // again through `/proc` cost 81 ms on a re-run of 20,000 files. The rest are read
        // from the open descriptor where there is one (a lookup through `/proc` costs more
        // than the call): a file read and a directory, below; by name for the rest.
        let opened = kind == NodeType::Dir || (kind == NodeType::File && !unchanged);
        if unchanged && self.parent_xattrs {
            node.xattrs = before.and_then(|b| b.xattrs.clone());
        } else if !opened {
            node.xattrs = self.xattrs(at, None);
        }
        match kind {
            NodeType::File if unchanged => {
                let before = before.expect("unchanged has a parent node");
                node.size = before.size;
                node.content.clone_from(&before.content);
                self.summary.files += 1;
                self.summary.files_unchanged += 1;
            }
            NodeType::File => {
                let mut file = match open_as_listed(at.dir.fd(), at.name, meta) {
                    Ok(f) => f,
                    Err(e) => {
                        self.errors.push(format!("{}: {e}", path.display()));
                        return Ok(None);
                    }
                };
                let xattrs = self.xattrs(at, Some(file.as_fd()));
                let hint = Some(meta.size);
                match read_checked(&mut file, meta, |f| self.cdc(f, hint)) {
                    Ok(read) => {
                        // The metadata of the version read (the listing's, unless the
                        // file changed and was read again).
                        node = node_from_meta(&read.meta, NodeType::File);
                        node.set_name(name);
                        node.xattrs = xattrs;
                        let (content, size) = read.value;
                        node.size = Some(size);
                        node.content = Some(content);
                        if read.changed {
                            self.flag_changed(&mut node, path);
                        }
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
                let Some(dir) = dir else {
                    return Ok(None);
                };
                node.xattrs = self.xattrs(at, Some(dir.fd()));
                let Some(tree) = self.read_dir(&dir, before)? else {
                    return Ok(None);
                };
                node.subtree = Some(self.packer.save_tree(&tree)?);
                self.summary.dirs += 1;
            }
            NodeType::Symlink => match rustix::fs::readlinkat(at.dir.fd(), at.name, Vec::new()) {
                Ok(t) => node.target_hex = Some(hex::encode(t.as_bytes())),
                Err(e) => {
                    self.errors.push(format!("{}: {e}", path.display()));
                    return Ok(None);
                }
            },
            NodeType::Chardev | NodeType::Blockdev => node.rdev = Some(meta.rdev),
            NodeType::Fifo | NodeType::Socket => {}
        }
        Ok(Some(node))
    }

    /// Publishes the counters so far to the repository handle's progress.
    fn report(&self) {
        report(&self.summary, &self.packer);
    }

    /// The xattrs of the entry `at` for its node (`None` when it has none), read from
    /// `open` when it is open; a failure to read them, or a name that is not UTF-8
    /// (FORMAT.md 8.1), is recorded as an error.
    fn xattrs(
        &mut self,
        at: &Entry<'_>,
        open: Option<BorrowedFd<'_>>,
    ) -> Option<Vec<(String, String)>> {
        let path = at.path;
        let read = match open {
            Some(fd) => crate::fsmeta::read_xattrs(fd),
            None => crate::fsmeta::read_xattrs(xattr_path(at).as_path()),
        };
        let attrs = match read {
            Ok(a) => a,
            Err(e) => {
                self.xattrs_recorded = false;
                self.errors
                    .push(format!("{}: extended attributes: {e}", path.display()));
                return None;
            }
        };
        let mut out = Vec::with_capacity(attrs.len());
        for (name, value) in attrs {
            match String::from_utf8(name) {
                Ok(name) => out.push((name, hex::encode(value))),
                Err(e) => {
                    self.xattrs_recorded = false;
                    self.errors.push(format!(
                        "{}: extended attribute name {:?} is not UTF-8",
                        path.display(),
                        String::from_utf8_lossy(e.as_bytes())
                    ));
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Whether a file can keep its parent's content without being read: same size, mtime,
    /// ctime and inode, and every blob still in the index; not flagged as changed while
    /// the parent read it, and recorded long enough after its last change.
    fn unchanged(&self, node: &Node, meta: &Meta, before: Option<&Node>) -> bool {
        let Some(b) = before else { return false };
        b.kind == Some(NodeType::File)
            && !b.changed_during_backup
            && self.settled(b)
            && b.size == Some(meta.size)
            && b.mtime == node.mtime
            && b.ctime == node.ctime
            && b.inode == node.inode
            && b.content.as_deref().is_some_and(|c| {
                c.iter().all(|c| match c {
                    Content::Blob { blob } => self.packer.has(blob),
                    Content::Zero { .. } => true,
                })
            })
    }

    /// Whether a parent's record of a file was taken long enough after the file's last
    /// change for its timestamps to tell (git's "racily clean" entries are those that
    /// are not): a write in the same timestamp step as the parent's reading would have
    /// left size, mtime and ctime as recorded. The parent read every file after it
    /// started, so a file last changed more than the coarsest step before that start is
    /// safe.
    fn settled(&self, b: &Node) -> bool {
        self.trusted_before
            .is_some_and(|t| b.mtime < t && b.ctime < t)
    }

    /// The tree of the open directory `dir`, beside its parent snapshot's tree `before`;
    /// `None` when it cannot be listed (recorded as an error). Each entry is looked up by
    /// its name in `dir`, never by a path.
    fn read_dir(&mut self, dir: &OpenDir, before: Option<Id>) -> Result<Option<Tree>> {
        if let Some(why) = crate::tree::too_deep(self.ahead.len() + 1, dir.path.as_os_str().len()) {
            self.errors
                .push(format!("{}: {why}: not backed up", dir.path.display()));
            return Ok(None);
        }
        let parent = match before {
            Some(id) => {
                // Read ahead by the directory above, unless it was the first of two alike.
                let ahead = match self.ahead.last_mut() {
                    Some((ahead, index)) => match index.get(&id) {
                        Some(&at) => self.packer.handle().block_on(ahead.tree_at(at)),
                        None => None,
                    },
                    None => None,
                };
                Some(match ahead {
                    Some(tree) => tree?,
                    None => self
                        .packer
                        .handle()
                        .block_on(self.packer.repo().read_tree(&id))?,
                })
            }
            None => None,
        };
        // The parent's subdirectories' trees, in the order the walk comes to them (both
        // sorted by name), and where each is first.
        let subtrees: Vec<Id> = parent
            .iter()
            .flat_map(|t| &t.nodes)
            .filter(|n| n.kind == Some(NodeType::Dir))
            .filter_map(|n| n.subtree)
            .collect();
        let index: HashMap<Id, usize> = subtrees
            .iter()
            .enumerate()
            .rev()
            .map(|(i, id)| (*id, i))
            .collect();
        let entries = match rustix::fs::Dir::read_from(dir.fd()) {
            Ok(e) => e,
            Err(e) => {
                self.errors.push(format!("{}: {e}", dir.path.display()));
                return Ok(None);
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            match entry {
                Ok(e) => {
                    let name = e.file_name().to_bytes();
                    if name != b"." && name != b".." {
                        names.push(std::ffi::OsStr::from_bytes(name).to_owned());
                    }
                }
                Err(e) => {
                    // A failing directory read ends the listing: it is incomplete.
                    self.errors.push(format!("{}: {e}", dir.path.display()));
                    break;
                }
            }
        }
        in_tree_order(&mut names);
        // The parent's subtrees are read ahead while the entries before them are walked;
        // those of subdirectories gone since the parent stop when the directory is done.
        let ahead = {
            let _runtime = self.packer.handle().enter();
            TreesAhead::new(self.packer.repo(), subtrees.into_iter().map(Some).collect())
        };
        self.ahead.push((ahead, index));
        let tree = crate::deep::with_room(|| self.entries(dir, parent.as_ref(), names));
        self.ahead.pop();
        tree.map(Some)
    }

    /// The tree of the entries `names` of the open directory `dir` (sorted), beside the
    /// parent snapshot's tree of it.
    fn entries(
        &mut self,
        dir: &OpenDir,
        parent: Option<&Tree>,
        names: Vec<std::ffi::OsString>,
    ) -> Result<Tree> {
        let mut tree = Tree::default();
        for name in names {
            let path = dir.display(&name);
            let before = parent.and_then(|t| t.find(&name));
            let at = Entry {
                dir,
                name: &name,
                path: &path,
            };
            if let Some(node) = self.entry(&at, &name, before)? {
                tree.nodes.push(node);
            }
            self.report();
        }
        Ok(tree)
    }

    /// Content-defined chunks of a stream, counted as read.
    fn cdc(&mut self, reader: impl Read, size_hint: Option<u64>) -> Result<(Vec<Content>, u64)> {
        let summary = &mut self.summary;
        self.chunker
            .cdc(&mut self.packer, reader, size_hint, &mut |packer, n| {
                summary.bytes_read += n;
                report(summary, packer);
            })
    }
}

/// Publishes the counters so far to the repository handle's progress.
pub(super) fn report<S: Storage>(s: &Summary, packer: &Packer<S>) {
    packer
        .repo()
        .progress
        .set(s.files, s.bytes_read, packer.added().bytes);
}

/// A node of `kind` with the metadata of `meta`.
pub(super) fn node_from_meta(meta: &Meta, kind: NodeType) -> Node {
    Node {
        kind: Some(kind),
        mode: meta.mode,
        uid: meta.uid,
        gid: meta.gid,
        mtime: meta.mtime_ns,
        ctime: meta.ctime_ns,
        inode: meta.ino,
        dev: meta.dev,
        links: meta.links,
        ..Node::default()
    }
}

/// Now, in nanoseconds since the Unix epoch (0 before it).
fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0))
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

/// Sorts a directory's names by their bytes (a tree's order, FORMAT.md) and drops repeats:
/// a listing read while files are renamed can return a name twice (NFS, FUSE, tmpfs on
/// some kernels), and a tree with a name twice is one that a restore refuses whole.
fn in_tree_order(names: &mut Vec<std::ffi::OsString>) {
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    names.dedup();
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    #[test]
    fn a_name_listed_twice_is_walked_once_and_names_sort_by_their_bytes() {
        let mut names: Vec<OsString> = ["b", "a", "B", "b", "\u{e9}"].map(OsString::from).into();
        super::in_tree_order(&mut names);
        assert_eq!(names, ["B", "a", "b", "\u{e9}"].map(OsString::from));
    }
}

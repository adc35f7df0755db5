//! File-system metadata that `std` does not reach: extended attributes (read on backup,
//! written back on restore), special files (device nodes, FIFOs, sockets) recreated with
//! `mknod`, and owner, times and mode applied through an open descriptor, or for entries
//! a restore does not open (symlinks, FIFOs, devices) by one name in an open directory,
//! never following a symlink.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, Timespec, Timestamps, UTIME_OMIT, XattrFlags};

use crate::tree::{Node, NodeType};

/// How often a listing or value is re-read when it grew between the size query and the
/// read (another process changing attributes while we look).
const RACE_RETRIES: usize = 3;

/// Where [`read_xattrs`] reads: a path (its last component not followed) or an open
/// descriptor. An empty buffer asks for the size needed (rustix's `*_query` calls: its
/// plain calls answer 0 for an empty buffer).
pub trait XattrSource: Copy {
    /// `llistxattr` or `flistxattr`.
    ///
    /// # Errors
    /// The call's.
    fn list(self, buf: &mut [u8]) -> rustix::io::Result<usize>;
    /// `lgetxattr` or `fgetxattr`.
    ///
    /// # Errors
    /// The call's.
    fn get(self, name: &OsStr, buf: &mut [u8]) -> rustix::io::Result<usize>;
}

impl XattrSource for &Path {
    fn list(self, buf: &mut [u8]) -> rustix::io::Result<usize> {
        if buf.is_empty() {
            rustix::fs::llistxattr_query(self)
        } else {
            rustix::fs::llistxattr(self, buf)
        }
    }
    fn get(self, name: &OsStr, buf: &mut [u8]) -> rustix::io::Result<usize> {
        if buf.is_empty() {
            rustix::fs::lgetxattr_query(self, name)
        } else {
            rustix::fs::lgetxattr(self, name, buf)
        }
    }
}

impl XattrSource for BorrowedFd<'_> {
    fn list(self, buf: &mut [u8]) -> rustix::io::Result<usize> {
        if buf.is_empty() {
            rustix::fs::flistxattr_query(self)
        } else {
            rustix::fs::flistxattr(self, buf)
        }
    }
    fn get(self, name: &OsStr, buf: &mut [u8]) -> rustix::io::Result<usize> {
        if buf.is_empty() {
            rustix::fs::fgetxattr_query(self, name)
        } else {
            rustix::fs::fgetxattr(self, name, buf)
        }
    }
}

/// The extended attributes of `at` as `(name, value)`, in the order the file system lists
/// them. File systems without xattr support give none.
///
/// # Errors
/// A failing list or get other than "not supported" / "gone meanwhile".
pub fn read_xattrs(at: impl XattrSource) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let Some(list) = sized_read(|| at.list(&mut []), |buf| at.list(buf))? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = OsStr::from_bytes(name);
        // An attribute removed after the listing is simply not there any more.
        if let Some(value) = sized_read(|| at.get(name, &mut []), |buf| at.get(name, buf))? {
            out.push((name.as_bytes().to_vec(), value));
        }
    }
    Ok(out)
}

/// Query-then-read for the xattr calls: `None` when the file system has no xattrs or the
/// attribute vanished, the bytes otherwise.
fn sized_read(
    query: impl Fn() -> rustix::io::Result<usize>,
    read: impl Fn(&mut [u8]) -> rustix::io::Result<usize>,
) -> io::Result<Option<Vec<u8>>> {
    for _ in 0..RACE_RETRIES {
        let len = match query() {
            Ok(len) => len,
            Err(rustix::io::Errno::NOTSUP | rustix::io::Errno::NODATA) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if len == 0 {
            return Ok(Some(Vec::new()));
        }
        let mut buf = vec![0u8; len];
        match read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            Err(rustix::io::Errno::RANGE) => {}
            Err(rustix::io::Errno::NOTSUP | rustix::io::Errno::NODATA) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other(
        "extended attributes kept changing while being read",
    ))
}

/// Creates the device node, FIFO or socket `node` describes as the new name `name` in the
/// open directory `dir`. Device nodes need privileges; the error says so.
///
/// # Errors
/// `mknod` failures, and node types that are not special files.
pub(crate) fn make_special(dir: BorrowedFd<'_>, name: &OsStr, node: &Node) -> io::Result<()> {
    let ft = match node.kind {
        Some(NodeType::Chardev) => FileType::CharacterDevice,
        Some(NodeType::Blockdev) => FileType::BlockDevice,
        Some(NodeType::Fifo) => FileType::Fifo,
        Some(NodeType::Socket) => FileType::Socket,
        _ => return Err(io::Error::other("not a special file")),
    };
    rustix::fs::mknodat(
        dir,
        name,
        ft,
        Mode::from_raw_mode(node.mode & 0o7777),
        node.rdev.unwrap_or(0),
    )?;
    Ok(())
}

/// Applies owner, extended attributes, modification time and mode to the open file or
/// directory `fd`, in the order that keeps each step possible and each result in place:
/// chown first (on Linux it drops `security.capability` and set-ID bits, so those must
/// come after it), xattrs while the file is still writable, the mode last. Through the
/// descriptor, so what changes is the file the restore wrote, wherever its name now
/// points. Returns what could not be applied; owner changes that need privileges are not
/// counted, as with `cp -p` run by a user.
pub(crate) fn apply_fd(fd: BorrowedFd<'_>, node: &Node) -> Vec<String> {
    apply(fd, node, false)
}

/// As [`apply_fd`], for a regular file this restore has just created: the owner and then
/// the mode are left as they are where the file has them already (one `fstat` instead of
/// a `fchown` and a `fchmod`, each an inode update through the file system's journal).
pub(crate) fn apply_created(fd: BorrowedFd<'_>, node: &Node) -> Vec<String> {
    apply(fd, node, true)
}

fn apply(fd: BorrowedFd<'_>, node: &Node, skip_what_is_right: bool) -> Vec<String> {
    let mut failed = Vec::new();
    let st = skip_what_is_right
        .then(|| rustix::fs::fstat(fd).ok())
        .flatten();
    let owned = st.is_some_and(|st| (st.st_uid, st.st_gid) == (node.uid, node.gid));
    // A chown may clear set-ID bits: the mode counts as right only without one.
    let moded = owned && st.is_some_and(|st| st.st_mode & 0o7777 == node.mode & 0o7777);
    if !owned {
        let _ = rustix::fs::fchown(fd, Some(uid(node)), Some(gid(node)));
    }
    for (name, value) in node.xattrs.iter().flatten() {
        let applied = hex::decode(value).map_err(io::Error::other).and_then(|v| {
            rustix::fs::fsetxattr(fd, name.as_str(), &v, XattrFlags::empty())
                .map_err(io::Error::from)
        });
        if let Err(e) = applied {
            failed.push(format!("xattr {name}: {e}"));
        }
    }
    if let Err(e) = rustix::fs::futimens(fd, &times(node)) {
        failed.push(format!("mtime: {e}"));
    }
    if !moded && let Err(e) = rustix::fs::fchmod(fd, Mode::from_raw_mode(node.mode & 0o7777)) {
        failed.push(format!("mode: {e}"));
    }
    failed
}

/// As [`apply_fd`], for a symlink or special file `name` in the open directory `dir`,
/// which a restore does not open (opening a FIFO waits, a device may act): each call
/// names one component in `dir` and does not follow it. Linux has no mode on symlinks,
/// and `chmod` follows one, so a special file's mode goes through an `O_PATH` handle
/// checked to be the special file, never a symlink put in its place.
pub(crate) fn apply_at(dir: BorrowedFd<'_>, name: &OsStr, node: &Node) -> Vec<String> {
    let mut failed = Vec::new();
    let _ = rustix::fs::chownat(
        dir,
        name,
        Some(uid(node)),
        Some(gid(node)),
        AtFlags::SYMLINK_NOFOLLOW,
    );
    let path = crate::beneath::proc_path(dir, name);
    for (attr, value) in node.xattrs.iter().flatten() {
        let applied = hex::decode(value).map_err(io::Error::other).and_then(|v| {
            rustix::fs::lsetxattr(&path, attr.as_str(), &v, XattrFlags::empty())
                .map_err(io::Error::from)
        });
        if let Err(e) = applied {
            failed.push(format!("xattr {attr}: {e}"));
        }
    }
    if let Err(e) = rustix::fs::utimensat(dir, name, &times(node), AtFlags::SYMLINK_NOFOLLOW) {
        failed.push(format!("mtime: {e}"));
    }
    if node.kind != Some(NodeType::Symlink)
        && let Err(e) = chmod_special(dir, name, node)
    {
        failed.push(format!("mode: {e}"));
    }
    failed
}

/// Sets the mode of the special file `name` in `dir`, refusing anything else there.
fn chmod_special(dir: BorrowedFd<'_>, name: &OsStr, node: &Node) -> io::Result<()> {
    let handle = crate::beneath::handle(dir, name)?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&handle)?.st_mode);
    if matches!(
        kind,
        FileType::Symlink | FileType::RegularFile | FileType::Directory
    ) {
        return Err(io::Error::other("replaced by another kind of file"));
    }
    let via = format!("/proc/self/fd/{}", handle.as_raw_fd());
    rustix::fs::chmod(via.as_str(), Mode::from_raw_mode(node.mode & 0o7777))?;
    Ok(())
}

fn uid(node: &Node) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(node.uid)
}

fn gid(node: &Node) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(node.gid)
}

/// The node's modification time, the access time left as it is.
fn times(node: &Node) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: node.mtime.div_euclid(1_000_000_000).try_into().unwrap_or(0),
            tv_nsec: node.mtime.rem_euclid(1_000_000_000).try_into().unwrap_or(0),
        },
    }
}

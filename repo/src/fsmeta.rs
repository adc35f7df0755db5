//! File-system metadata that `std` does not reach: extended attributes (read on backup,
//! written back on restore), special files (device nodes, FIFOs, sockets) recreated with
//! `mknod`, and owner, times and mode applied by path without following symlinks or
//! opening the file (opening a FIFO for writing would block).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use rustix::fs::{AtFlags, CWD, FileType, Mode, Timespec, Timestamps, UTIME_OMIT, XattrFlags};

use crate::tree::{Node, NodeType};

/// How often a listing or value is re-read when it grew between the size query and the
/// read (another process changing attributes while we look).
const RACE_RETRIES: usize = 3;

/// The extended attributes of `path` (not following a symlink) as `(name, value)`, in the
/// order the file system lists them. File systems without xattr support give none.
///
/// # Errors
/// A failing `llistxattr` or `lgetxattr` other than "not supported" / "gone meanwhile".
pub fn read_xattrs(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let Some(list) = sized_read(
        || rustix::fs::llistxattr_query(path),
        |buf| rustix::fs::llistxattr(path, buf),
    )?
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = OsStr::from_bytes(name);
        // An attribute removed after the listing is simply not there any more.
        if let Some(value) = sized_read(
            || rustix::fs::lgetxattr_query(path, name),
            |buf| rustix::fs::lgetxattr(path, name, buf),
        )? {
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

/// Creates the device node, FIFO or socket `node` describes at `path` (replacing what is
/// there). Device nodes need privileges; the error says so.
///
/// # Errors
/// `mknod` failures, and node types that are not special files.
pub(crate) fn make_special(path: &Path, node: &Node) -> io::Result<()> {
    let ft = match node.kind {
        Some(NodeType::Chardev) => FileType::CharacterDevice,
        Some(NodeType::Blockdev) => FileType::BlockDevice,
        Some(NodeType::Fifo) => FileType::Fifo,
        Some(NodeType::Socket) => FileType::Socket,
        _ => return Err(io::Error::other("not a special file")),
    };
    let _ = std::fs::remove_file(path);
    rustix::fs::mknodat(
        CWD,
        path,
        ft,
        Mode::from_raw_mode(node.mode & 0o7777),
        node.rdev.unwrap_or(0),
    )?;
    Ok(())
}

/// Applies owner, extended attributes, modification time and mode to `path`, in the order
/// that keeps each step possible and each result in place: chown first (on Linux it drops
/// `security.capability` and set-ID bits, so those must come after it), xattrs while the
/// file is still writable, the mode last, and no chmod on symlinks (Linux has none).
/// Returns what could not be applied; owner changes that need privileges are not counted,
/// as with `cp -p` run by a user.
pub(crate) fn apply(path: &Path, node: &Node) -> Vec<String> {
    let mut failed = Vec::new();
    let _ = rustix::fs::chownat(
        CWD,
        path,
        Some(rustix::fs::Uid::from_raw(node.uid)),
        Some(rustix::fs::Gid::from_raw(node.gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    );
    for (name, value) in node.xattrs.iter().flatten() {
        let applied = hex::decode(value).map_err(io::Error::other).and_then(|v| {
            rustix::fs::lsetxattr(path, name.as_str(), &v, XattrFlags::empty())
                .map_err(io::Error::from)
        });
        if let Err(e) = applied {
            failed.push(format!("xattr {name}: {e}"));
        }
    }
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: node.mtime.div_euclid(1_000_000_000).try_into().unwrap_or(0),
            tv_nsec: node.mtime.rem_euclid(1_000_000_000).try_into().unwrap_or(0),
        },
    };
    if let Err(e) = rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW) {
        failed.push(format!("mtime: {e}"));
    }
    if node.kind != Some(NodeType::Symlink) {
        let mode = Mode::from_raw_mode(node.mode & 0o7777);
        if let Err(e) = rustix::fs::chmodat(CWD, path, mode, AtFlags::empty()) {
            failed.push(format!("mode: {e}"));
        }
    }
    failed
}

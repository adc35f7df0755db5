//! Names looked up inside a directory that is already open, never through a symlink: how
//! the backup walk and the restore reach every entry below the paths they were given.
//!
//! A path is looked up again, component by component, each time it is used: someone who
//! can write a directory on the way can swap it for a symlink between two uses, and the
//! second use then lands outside the tree. A directory opened once
//! and named by its descriptor stays the directory that was opened, wherever it is moved.
//! So below the top, every name is one component resolved in an open directory, with
//! `O_NOFOLLOW`; paths of several components (a hard link's first name) go through
//! `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or one component at a time
//! where the kernel has no `openat2` (before Linux 5.6, or a seccomp filter that refuses
//! it).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Flags of a directory opened to look names up in and list.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens the directory `name` (one component) inside `dir`; fails on a symlink there.
///
/// # Errors
/// `ELOOP` or `ENOTDIR` for a symlink or a non-directory, and any failure to open.
pub fn open_dir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty())?)
}

/// Opens the directory at the relative path `rel` below `root`, every component looked up
/// without following a symlink and none leaving `root` (`..` is refused).
///
/// # Errors
/// A symlink or `..` on the way (`ELOOP`, `EXDEV`), a missing component, or any failure
/// to open.
pub fn open_dir_beneath(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    if rel.as_os_str().is_empty() {
        return open_dir(root, OsStr::new("."));
    }
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(root, rel, DIR_FLAGS, Mode::empty(), resolve) {
        // No openat2 (ENOSYS; EPERM from a seccomp filter), or EAGAIN: a rename elsewhere
        // on the system raced the lookup. The fallback below is as safe.
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM | rustix::io::Errno::AGAIN) => {}
        other => return Ok(other?),
    }
    let mut fd = open_dir(root, OsStr::new("."))?;
    for part in rel.components() {
        match part {
            Component::Normal(name) => fd = open_dir(fd.as_fd(), name)?,
            Component::CurDir => {}
            _ => {
                return Err(io::Error::other(format!(
                    "{} leaves the directory it is relative to",
                    rel.display()
                )));
            }
        }
    }
    Ok(fd)
}

/// Opens `path` itself (its last component not followed) as an `O_PATH` handle: a
/// reference to what is there now that opens nothing (no FIFO waits, no device wakes), to
/// be checked with `fstat` and then used in the `*at` calls.
///
/// # Errors
/// Any failure to open.
pub fn handle(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The path that names `name` in the open directory `dir` for calls that take only paths
/// (the `l*xattr` family): `/proc/self/fd/N/name`. The kernel resolves `/proc/self/fd/N`
/// to the directory that was opened, not by its name, and the `l*` calls do not follow
/// `name` itself.
#[must_use]
pub fn proc_path(dir: BorrowedFd<'_>, name: &OsStr) -> PathBuf {
    let mut path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    path.push(name);
    path
}

/// An open directory and the path it was reached by, for messages only.
#[derive(Debug)]
pub struct OpenDir {
    /// The directory.
    pub fd: OwnedFd,
    /// Where it was when it was opened (it may have moved since).
    pub path: PathBuf,
}

impl OpenDir {
    /// Opens the directory `path`, following symlinks on the way: the top of a backup or a
    /// restore is what its user named.
    ///
    /// # Errors
    /// Any failure to open, or `path` not a directory.
    pub fn top(path: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens the directory `name` inside this one, without following a symlink there.
    ///
    /// # Errors
    /// As [`open_dir`].
    pub fn child(&self, name: &OsStr) -> io::Result<Self> {
        Ok(Self {
            fd: open_dir(self.fd.as_fd(), name)?,
            path: self.path.join(name),
        })
    }

    /// This directory's descriptor.
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The path of `name` inside this directory, for messages.
    #[must_use]
    pub fn display(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_below_is_opened_and_one_through_a_symlink_or_upwards_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a"), dir.path().join("link")).unwrap();
        let root = OpenDir::top(dir.path()).unwrap();
        assert!(open_dir_beneath(root.fd(), Path::new("a/b")).is_ok());
        assert!(open_dir_beneath(root.fd(), Path::new("")).is_ok());
        assert!(open_dir_beneath(root.fd(), Path::new("link/b")).is_err());
        assert!(open_dir_beneath(root.fd(), Path::new("a/../..")).is_err());
        assert!(root.child(OsStr::new("link")).is_err());
    }
}

//! What one look at an entry tells the walk: its kind, owner, mode, times, size and
//! identity. Taken by the entry's name in its open directory with one `statx` that does
//! not follow a symlink, or from an open descriptor. The walk's own type, because
//! `std::fs::Metadata` comes only from a path looked up whole or from a file opened, and
//! the `O_PATH` open, `fstat` and close that gave it cost twice the one call (20,000
//! files on ext4: 57 ms against 29 ms).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt as _;

use rustix::fs::{AtFlags, FileType, StatxFlags};
use rustix::io::Errno;

/// An entry's metadata, as `lstat` gives it (nanosecond times since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) kind: FileType,
    /// The permission bits with setuid, setgid and sticky (`st_mode & 0o7777`).
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) links: u64,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) rdev: u64,
    pub(super) size: u64,
    pub(super) mtime_ns: i128,
    pub(super) ctime_ns: i128,
}

impl Meta {
    /// The entry `name` in the open directory `dir`, itself (a symlink is not followed).
    ///
    /// # Errors
    /// Any failure to look the name up.
    pub(super) fn at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Self> {
        // As `lstat`, which never triggers an automount; `statx` does unless told not to.
        let flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
        match rustix::fs::statx(dir, name, flags, StatxFlags::BASIC_STATS) {
            Ok(st) => Ok(Self::from_statx(&st)),
            // No statx (before Linux 4.11, or a seccomp filter that refuses it).
            Err(Errno::NOSYS | Errno::PERM) => {
                let handle = File::from(crate::beneath::handle(dir, name)?);
                Ok(Self::from_std(&handle.metadata()?))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// What the open descriptor `fd` refers to.
    ///
    /// # Errors
    /// Any failure of `fstat`.
    pub(super) fn of(fd: BorrowedFd<'_>) -> io::Result<Self> {
        match rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS) {
            Ok(st) => Ok(Self::from_statx(&st)),
            Err(Errno::NOSYS | Errno::PERM) => Ok(Self::from_std(
                &File::from(fd.try_clone_to_owned()?).metadata()?,
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// The same fields from `std`'s metadata (which `std` takes with `statx` too, and
    /// `fstat` without it): device numbers are made by the same `makedev`.
    pub(super) fn from_std(meta: &std::fs::Metadata) -> Self {
        Self {
            kind: FileType::from_raw_mode(meta.mode()),
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
            links: meta.nlink(),
            dev: meta.dev(),
            ino: meta.ino(),
            rdev: meta.rdev(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn from_statx(st: &rustix::fs::Statx) -> Self {
        let mode = u32::from(st.stx_mode);
        Self {
            kind: FileType::from_raw_mode(mode),
            mode: mode & 0o7777,
            uid: st.stx_uid,
            gid: st.stx_gid,
            links: u64::from(st.stx_nlink),
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            rdev: rustix::fs::makedev(st.stx_rdev_major, st.stx_rdev_minor),
            size: st.stx_size,
            mtime_ns: ns(st.stx_mtime.tv_sec, i64::from(st.stx_mtime.tv_nsec)),
            ctime_ns: ns(st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
        }
    }

    pub(super) fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    pub(super) fn is_file(&self) -> bool {
        self.kind == FileType::RegularFile
    }
}

fn ns(sec: i64, nsec: i64) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

#[cfg(test)]
mod tests {
    use super::Meta;
    use std::os::fd::AsFd as _;

    #[test]
    fn one_statx_by_name_gives_what_std_gives_for_each_kind_of_entry() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("file"), b"12345").unwrap();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::os::unix::fs::symlink("file", d.join("link")).unwrap();
        let open = std::fs::File::open(d).unwrap();
        for name in ["file", "dir", "link"] {
            let std_meta = std::fs::symlink_metadata(d.join(name)).unwrap();
            let by_name = Meta::at(open.as_fd(), name.as_ref()).unwrap();
            assert_eq!(by_name, Meta::from_std(&std_meta), "{name}");
        }
        let by_name = Meta::at(open.as_fd(), "file".as_ref()).unwrap();
        assert!(by_name.is_file() && by_name.size == 5);
        let link = Meta::at(open.as_fd(), "link".as_ref()).unwrap();
        assert_eq!(link.kind, rustix::fs::FileType::Symlink, "not followed");
        let file = std::fs::File::open(d.join("file")).unwrap();
        assert_eq!(Meta::of(file.as_fd()).unwrap(), by_name);
        let of_dir = Meta::of(open.as_fd()).unwrap();
        assert!(of_dir.is_dir());
        assert_eq!(of_dir, Meta::from_std(&std::fs::metadata(d).unwrap()));
        let dev = std::fs::File::open("/dev").unwrap();
        let null = Meta::at(dev.as_fd(), "null".as_ref()).unwrap();
        assert_eq!(
            null,
            Meta::from_std(&std::fs::symlink_metadata("/dev/null").unwrap())
        );
        assert_ne!(null.rdev, 0, "a device's own number");
    }
}

//! Finding and reading the entries a backup reads, safely in a tree others can write to:
//! each entry is named by one component in its open directory (`Entry`), the file opened
//! must be the one the walk listed (no symlink followed, no FIFO waited on, no other file
//! swapped in), a file under a lease is waited for rather than skipped,
//! and a file that changes while it is read is read again, or reported.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Seek as _, SeekFrom};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::meta::Meta;
use crate::beneath::OpenDir;

use crate::error::{RepoError, Result};

/// How many times a file that changes while it is read is read in all. Two: a file saved
/// once during its reading (an editor, a configuration tool) is stored whole, as its
/// new version; one that changes all the time (a busy log or database) costs twice its
/// reading, not more, and is flagged (`Reading::changed`).
pub(super) const READINGS: u32 = 2;

/// What tells that a file changed between two looks at it (as git, restic and borg
/// compare): a write moves the size or the mtime, anything else the ctime; another file
/// under the name moves the inode. A write within the clock's tick moves none of them,
/// which is why the next backup does not trust a file changed near this one's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i128,
    ctime: i128,
}

impl Stamp {
    fn of(meta: &Meta) -> Self {
        Self {
            dev: meta.dev,
            ino: meta.ino,
            size: meta.size,
            mtime: meta.mtime_ns,
            ctime: meta.ctime_ns,
        }
    }
}

/// Whether the file that was `listed` is no longer as it was, by its metadata `now` (a
/// block backup's image, read once: `block.rs`).
pub(super) fn changed_since(listed: &Meta, now: &Meta) -> bool {
    Stamp::of(listed) != Stamp::of(now)
}

/// A file's content as [`read_checked`] read it.
pub(super) struct Reading<T> {
    /// What the last reading returned.
    pub(super) value: T,
    /// The file's metadata (`fstat`) just after the last reading: the version read,
    /// unless `changed`.
    pub(super) meta: Meta,
    /// Whether the file changed during the last reading too: `value` may mix versions.
    pub(super) changed: bool,
}

/// Reads `file`, opened as `listed`, with `read`, and compares its `fstat` afterwards with
/// the listing (then with the `fstat` after the previous reading): a file that changed
/// is read again from its start, up to [`READINGS`] times in all. Checked after reading,
/// not only before, since only a look after the last byte covers the whole reading.
///
/// # Errors
/// `read`'s errors; a failed `fstat` or seek as [`RepoError::Io`], as a failed read is.
pub(super) fn read_checked<T>(
    file: &mut File,
    listed: &Meta,
    mut read: impl FnMut(&mut File) -> Result<T>,
) -> Result<Reading<T>> {
    let io = |e| RepoError::io(Path::new("input"), e);
    let mut before = Stamp::of(listed);
    let mut reading = 1;
    loop {
        let value = read(file)?;
        let meta = Meta::of(file.as_fd()).map_err(io)?;
        let after = Stamp::of(&meta);
        if after == before || reading == READINGS {
            return Ok(Reading {
                value,
                meta,
                changed: after != before,
            });
        }
        before = after;
        reading += 1;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
    }
}

/// Opens the regular file that `listed` (its `lstat`) describes, or fails: the name is
/// opened without following a symlink, and must be the same file. In a tree others can
/// write to, a file swapped for a symlink between the listing and the open would otherwise
/// store the link's target (`/etc/shadow`) under the file's name, owner and mode, and one
/// swapped for a FIFO would hang the backup.
///
/// The open is non-blocking, so a FIFO swapped in opens at once (and is refused); a file
/// under a lease (Samba, the NFS server) then fails with `EWOULDBLOCK` and is opened again
/// the blocking way, which waits for the holder to let go.
pub(super) fn open_as_listed(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    listed: &Meta,
) -> std::io::Result<File> {
    let same = |file: &File| -> std::io::Result<()> {
        let opened = Meta::of(file.as_fd())?;
        if !opened.is_file() || opened.dev != listed.dev || opened.ino != listed.ino {
            return Err(std::io::Error::other(
                "replaced by another file while the backup listed it; not read",
            ));
        }
        Ok(())
    };
    // A device node swapped in is opened (read-only) before it is refused. Making one
    // takes CAP_MKNOD, and the `/proc` way below, which opens nothing unchecked, costs
    // 2.6 times as much per file (20,000 files: 167 ms against 64 ms with the fstat).
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    // Reads of a regular file ignore O_NONBLOCK, so it is left set.
    match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => {
            let file = File::from(fd);
            same(&file)?;
            return Ok(file);
        }
        Err(rustix::io::Errno::WOULDBLOCK) => {}
        Err(e) => return Err(e.into()),
    }
    // An O_PATH descriptor opens nothing (no FIFO waits for a writer), and the file it
    // names, once checked, is opened through /proc with a blocking open.
    let handle = File::from(crate::beneath::handle(dir, name)?);
    same(&handle)?;
    // The wait is the kernel's: a holder that does not let go is broken after
    // /proc/sys/fs/lease-break-time (45 s by default), so a hostile one costs that much
    // per file, never a hang.
    let file = File::open(format!("/proc/self/fd/{}", handle.as_raw_fd()))?;
    same(&file)?;
    Ok(file)
}

/// An entry the walk looks at: `name` in the open directory `dir`, and its path for
/// messages.
pub(super) struct Entry<'a> {
    pub(super) dir: &'a OpenDir,
    pub(super) name: &'a OsStr,
    pub(super) path: &'a Path,
}

/// The directory a source path's entry is looked up in, opened (following symlinks: the
/// user named the path), and the entry's name there (`.` for `/`, `.` or a path ending in
/// `..`, which are directories themselves).
pub(super) fn top_dir(path: &Path) -> std::io::Result<(OpenDir, std::ffi::OsString)> {
    match path.file_name() {
        Some(name) => {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            Ok((OpenDir::top(parent)?, name.to_owned()))
        }
        None => Ok((OpenDir::top(path)?, ".".into())),
    }
}

/// Where the `l*xattr` calls find an entry: by its name in its open directory through
/// `/proc/self/fd` (`beneath::proc_path`), or by its path where there is no `/proc` (a
/// bare container), which a swap on the way could redirect to another file's attributes.
pub(super) fn xattr_path(at: &Entry<'_>) -> PathBuf {
    static PROC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *PROC.get_or_init(|| Path::new("/proc/self/fd").is_dir()) {
        crate::beneath::proc_path(at.dir.fd(), at.name)
    } else {
        at.path.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::{READINGS, read_checked};
    use std::io::{Read as _, Write as _};

    /// Reads a file of `bytes` (its mtime an hour back, so that a write moves it however
    /// coarse the clock) with `read_checked`, calling `during(path, reading)` within each
    /// reading after its text was read; the number of readings and the result.
    fn read_changing(
        bytes: &[u8],
        mut during: impl FnMut(&std::path::Path, u32),
    ) -> (u32, super::Reading<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - std::time::Duration::from_hours(1))
            .unwrap();
        let listed = listed(&path);
        let mut file = open_as_listed(&path, &listed).unwrap();
        let mut calls = 0;
        let r = read_checked(&mut file, &listed, |f| {
            calls += 1;
            let mut s = String::new();
            f.read_to_string(&mut s).unwrap();
            during(&path, calls);
            Ok(s)
        })
        .unwrap();
        (calls, r)
    }

    /// Opens `path` as the walk does: by its name in its open directory.
    fn open_as_listed(
        path: &std::path::Path,
        listed: &super::Meta,
    ) -> std::io::Result<std::fs::File> {
        let dir = crate::beneath::OpenDir::top(path.parent().unwrap())?;
        super::open_as_listed(dir.fd(), path.file_name().unwrap(), listed)
    }

    /// What the walk's listing says of `path`.
    fn listed(path: &std::path::Path) -> super::Meta {
        super::Meta::from_std(&std::fs::symlink_metadata(path).unwrap())
    }

    fn append(path: &std::path::Path, bytes: &[u8]) {
        let mut f = std::fs::File::options().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    }

    #[test]
    fn a_file_that_stays_still_is_read_once() {
        let (calls, r) = read_changing(b"still", |_, _| {});
        assert_eq!((calls, r.value.as_str(), r.changed), (1, "still", false));
    }

    #[test]
    fn a_file_changed_during_its_first_reading_is_read_again_whole() {
        let (calls, r) = read_changing(b"v1", |path, reading| {
            if reading == 1 {
                append(path, b"+v2");
            }
        });
        assert_eq!((calls, r.value.as_str(), r.changed), (2, "v1+v2", false));
        assert_eq!(r.meta.size, 5, "the metadata of the version read");
    }

    #[test]
    fn a_file_that_keeps_changing_is_read_a_bounded_number_of_times_and_flagged() {
        let (calls, r) = read_changing(b"x", |path, _| append(path, b"x"));
        assert_eq!((calls, r.changed), (READINGS, true));
    }

    #[test]
    fn a_file_replaced_after_its_listing_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, secret) = (dir.path().join("f"), dir.path().join("secret"));
        std::fs::write(&path, b"mine").unwrap();
        std::fs::write(&secret, b"not yours").unwrap();
        let listed = listed(&path);
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
        let listed = listed(&path);
        let opened = open_as_listed(&path, &listed);
        child.kill().unwrap();
        child.wait().unwrap();
        let mut text = String::new();
        opened.unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "served");
    }
}

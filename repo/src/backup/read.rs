//! Opening the files a backup reads, safely in a tree others can write to: the file
//! opened must be the one the walk listed (no symlink followed, no FIFO waited on, no
//! other file swapped in), and a file under a lease is waited for rather than skipped.

use std::fs::File;
use std::path::Path;

/// Opens the regular file that `listed` (its `lstat`) describes, or fails: the path is
/// looked up without following a symlink or opening what it names, and must name the same
/// file, which is then opened. In a tree others can write to, a file swapped for a symlink
/// between the listing and the open would otherwise store the link's target
/// (`/etc/shadow`) under the file's name, owner and mode, and one swapped for a FIFO would
/// hang the backup.
pub(super) fn open_as_listed(path: &Path, listed: &std::fs::Metadata) -> std::io::Result<File> {
    use rustix::fs::OFlags;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let open = |path: &Path, flags: OFlags| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits().cast_signed())
            .open(path)
    };
    let same = |file: &File| -> std::io::Result<()> {
        let opened = file.metadata()?;
        if !opened.is_file() || opened.dev() != listed.dev() || opened.ino() != listed.ino() {
            return Err(std::io::Error::other(
                "replaced by another file while the backup listed it; not read",
            ));
        }
        Ok(())
    };
    // An O_PATH descriptor opens nothing (no FIFO waits for a writer), and the file it
    // names, once checked, is opened for reading through /proc like any open: one under a
    // lease (Samba, the NFS server) waits for the holder to let go rather than failing.
    let handle = open(path, OFlags::PATH | OFlags::NOFOLLOW)?;
    same(&handle)?;
    // The wait is the kernel's: a holder that does not let go is broken after
    // /proc/sys/fs/lease-break-time (45 s by default), so a hostile one costs that much
    // per file, never a hang.
    match File::open(format!("/proc/self/fd/{}", handle.as_raw_fd())) {
        Ok(file) => {
            same(&file)?;
            Ok(file)
        }
        // No /proc (a bare container): a non-blocking open cannot hang on a FIFO swapped
        // in since, but fails on a leased file.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let file = open(path, OFlags::NOFOLLOW | OFlags::NONBLOCK)?;
            same(&file)?;
            Ok(file)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::open_as_listed;

    #[test]
    fn a_file_replaced_after_its_listing_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, secret) = (dir.path().join("f"), dir.path().join("secret"));
        std::fs::write(&path, b"mine").unwrap();
        std::fs::write(&secret, b"not yours").unwrap();
        let listed = std::fs::symlink_metadata(&path).unwrap();
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
        let listed = std::fs::symlink_metadata(&path).unwrap();
        let opened = open_as_listed(&path, &listed);
        child.kill().unwrap();
        child.wait().unwrap();
        let mut text = String::new();
        opened.unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "served");
    }
}

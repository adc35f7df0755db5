//! The marker a restore keeps at the top of its target while it runs:
//! `.kura-restore-unfinished`. While it is there, small files whose name is free are
//! written under that name directly (`write::place_file`), without a temporary name and a
//! rename (the rename was a fifth of a small-file restore's time, and restic does
//! without). A restore that is killed leaves the marker behind, which says that the
//! files being written at that moment may be short; a restore that ends, with failures
//! listed or giving up, has left no such file (each one failed is removed) and takes the
//! marker away. A marker a killed restore left is taken away only by a restore of the
//! whole snapshot, which rewrites every file: one of some paths (`--include`) leaves the
//! others as the killed one left them. Each restore holds a shared `flock` on the marker
//! while it runs, and takes the marker away only if it can lock it alone: a restore that
//! ends while another one into the same target is still writing leaves it to that one.
//! Without a marker (the target refuses one, or it cannot be locked), every file goes
//! through a temporary name as before.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

/// The marker's name, at the top of the target.
pub const UNFINISHED: &str = ".kura-restore-unfinished";

/// Opens of the marker tried before a restore goes without it.
const LOCK_TRIES: usize = 50;

/// The marker, made by this restore, left by one that was killed, or held by one that
/// still runs; locked shared by this restore.
pub(super) struct Unfinished {
    file: OwnedFd,
    /// Whether it was there before this restore (left by a killed one, or held by one
    /// still running).
    inherited: bool,
}

impl Unfinished {
    /// Makes the marker in the target's top directory `top`, or opens the one there, and
    /// locks it shared; never follows a symlink or opens another kind of file there (a FIFO
    /// would fail the open: `O_NONBLOCK` with no reader). `None` when it cannot be made
    /// or locked.
    pub(super) fn mark(top: BorrowedFd<'_>) -> Option<Self> {
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(0o600);
        // A restore ending at this moment may take the marker away between the open and
        // the lock: then the name is opened again.
        for _ in 0..LOCK_TRIES {
            let (file, inherited) =
                match rustix::fs::openat(top, UNFINISHED, flags | OFlags::EXCL, mode) {
                    Ok(file) => (file, false),
                    Err(rustix::io::Errno::EXIST) => (
                        rustix::fs::openat(top, UNFINISHED, flags - OFlags::CREATE, mode).ok()?,
                        true,
                    ),
                    Err(_) => return None,
                };
            let st = rustix::fs::fstat(&file).ok()?;
            if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() {
                return None;
            }
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    // Held alone for a moment by a restore taking it away.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
                // A file system without locks: no marker, temporary names for all.
                Err(_) => return None,
            }
            let there = rustix::fs::statat(top, UNFINISHED, AtFlags::SYMLINK_NOFOLLOW).ok();
            if there.is_some_and(|t| (t.st_dev, t.st_ino) == (st.st_dev, st.st_ino)) {
                return Some(Self { file, inherited });
            }
        }
        None
    }

    /// Takes the marker away, if the name still is this restore's marker (a snapshot may
    /// hold a file of that name at its top, restored over it), unless it was there before
    /// and this one restored only part of the snapshot (`everything` false), or another
    /// restore still holds its lock.
    pub(super) fn finished(self, top: BorrowedFd<'_>, everything: bool) {
        if self.inherited && !everything {
            return;
        }
        // Another restore into this target still runs (its shared lock): it takes the
        // marker away when it ends.
        if rustix::fs::flock(self.file.as_fd(), FlockOperation::NonBlockingLockExclusive).is_err() {
            return;
        }
        let (Ok(ours), Ok(there)) = (
            rustix::fs::fstat(self.file.as_fd()),
            rustix::fs::statat(top, UNFINISHED, AtFlags::SYMLINK_NOFOLLOW),
        ) else {
            return;
        };
        if (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino) {
            let _ = rustix::fs::unlinkat(top, UNFINISHED, AtFlags::empty());
        }
    }
}

//! The marker a restore keeps at the top of its target while it runs:
//! `.kura-restore-unfinished`. While it is there, small files whose name is free are
//! written under that name directly (`write::place_file`), without a temporary name and a
//! rename (the rename was a fifth of a small-file restore's time, and restic does
//! without). A restore that is killed leaves the marker behind, which says that the
//! files being written at that moment may be short.
//!
//! The marker is a log, one line appended by each restore as it starts and one as it
//! ends (with failures listed or not: each file that failed is removed):
//!
//! ```text
//! start <entry> <root tree ID> whole|part
//! done <entry> [<entry> ...]
//! ```
//!
//! `<entry>` is a random number in 16 hex digits. A restore that started and has no `done`
//! line stopped without ending (or still runs). The entries after a `done` are the stopped
//! restores that this one made good: a restore of the whole of the same tree, which began
//! after they had stopped, while no other restore ran, and wrote every file anew. The
//! marker is taken away only when no stopped restore is left that none made good: a whole
//! restore of another snapshot, one of some paths (`--include`), or one that could not
//! write every file leaves the marker, since files of the stopped one may still be short;
//! so does a log that cannot be read (a line cut short), until it is deleted by hand.
//!
//! Each restore holds a shared `flock` on the marker while it runs. It reads the log only
//! when it can lock it alone: as it starts, to learn which restores have stopped (none of
//! them can still be writing: their temporary files, tagged with their entries, are
//! removed from the directories this one restores), and as it ends, to decide whether to
//! take the marker away. A restore that ends while another one into the same target still
//! writes leaves that to the other. The lock lasts as long as the restore's last blocking
//! task that writes files into place ([`Hold`]): a restore whose future a library caller
//! drops still counts as running until those tasks end. Without a marker (the target refuses one, it cannot be
//! locked or a line cannot be appended, a network file system, or a name that holds
//! anything but a regular file of this user's with one link), every file goes through a
//! temporary name as before.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

use crate::id::Id;

/// The marker's name, at the top of the target.
pub const UNFINISHED: &str = ".kura-restore-unfinished";

/// Opens of the marker tried before a restore goes without it.
const LOCK_TRIES: usize = 50;

/// The longest log read; a longer one is not this restore's to judge, and stays.
const LOG_LIMIT: usize = 1 << 20;

/// The prefix of the temporary names a restore writes files under:
/// `.kura-restore-<tag>-<number>`, each in 16 hex digits. A restore killed part-way leaves
/// such files behind, which may be deleted; a later restore that begins after it removes
/// those of its tag from the directories it restores ([`remove_leftovers`]).
pub const TEMP_PREFIX: &str = ".kura-restore-";

/// How a restore names the files it creates: under their own names where those are free
/// (`own`, while the target holds the marker), and otherwise under temporary names that
/// begin with `tag`, its entry in the marker's log (0 without a marker), so that a later
/// restore can tell the leftovers of a killed one from the files of one still running.
#[derive(Clone)]
pub(super) struct Naming {
    /// A share of the marker's lock ([`Hold`]), kept by each blocking task
    /// that writes files into place until it ends.
    pub(super) own: Option<Hold>,
    pub(super) tag: u64,
}

/// The marker, made by this restore or found there; locked shared by this restore, with
/// this restore's `start` line in it.
pub(super) struct Unfinished {
    file: Arc<OwnedFd>,
    /// This restore's entry in the log.
    entry: u64,
    /// Restores that had stopped when this one began (it was alone then), with their root
    /// trees; a whole restore of the same tree makes those good if it writes every file.
    stopped: Vec<(u64, String)>,
    /// Whether this restore is of the whole tree `tree`.
    whole: Option<String>,
}

impl Unfinished {
    /// Makes the marker in the target's top directory `top`, or opens the one there, locks
    /// it shared and appends this restore's `start` line (of root tree `tree`, `whole` or
    /// of some paths). `None`, and so no marker, when it cannot be made, locked or written;
    /// on a network file system, whose appends and locks other machines need not see as
    /// this one does; and when what is at the name is not a regular file of this user's
    /// with one link (never following a symlink or opening a FIFO or a device there, nor
    /// writing into a file someone linked there).
    pub(super) fn mark(top: BorrowedFd<'_>, tree: &Id, whole: bool) -> Option<Self> {
        if rustix::fs::fstatfs(top).is_ok_and(|fs| on_network(i128::from(fs.f_type))) {
            return None;
        }
        let flags = OFlags::RDWR
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(0o600);
        // Not 0, the tag of temporary names made without a marker.
        let entry = kura_keys::rand::u64().ok()?.max(1);
        let tree = tree.to_hex();
        let ours = |st: &rustix::fs::Stat| {
            rustix::fs::FileType::from_raw_mode(st.st_mode).is_file()
                && st.st_nlink == 1
                && st.st_uid == rustix::process::geteuid().as_raw()
        };
        // A restore ending at this moment may take the marker away between the open and
        // the lock: then the name is opened again.
        for _ in 0..LOCK_TRIES {
            // Looked at before it is opened: opening a device can act on it.
            if rustix::fs::statat(top, UNFINISHED, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| !ours(&st))
            {
                return None;
            }
            let (file, created) =
                match rustix::fs::openat(top, UNFINISHED, flags | OFlags::EXCL, mode) {
                    Ok(file) => (file, true),
                    Err(rustix::io::Errno::EXIST) => (
                        rustix::fs::openat(top, UNFINISHED, flags - OFlags::CREATE, mode).ok()?,
                        false,
                    ),
                    Err(_) => return None,
                };
            let st = rustix::fs::fstat(&file).ok()?;
            if !ours(&st) {
                return None;
            }
            // Alone, every restore with a `start` line and no `done` has stopped: a live
            // one holds its lock from before it writes its line.
            let stopped =
                if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
                    open_now(file.as_fd()).unwrap_or_default()
                } else {
                    Vec::new()
                };
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    // Held alone for a moment by a restore starting or taking it away.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
                // A file system without locks: no marker, temporary names for all; one
                // made just now goes again, so that nothing says a restore was stopped.
                Err(_) => {
                    if created {
                        unlink_if_same(top, &st);
                    }
                    return None;
                }
            }
            let there = rustix::fs::statat(top, UNFINISHED, AtFlags::SYMLINK_NOFOLLOW).ok();
            if there.is_none_or(|t| (t.st_dev, t.st_ino) != (st.st_dev, st.st_ino)) {
                continue;
            }
            let kind = if whole { "whole" } else { "part" };
            append(file.as_fd(), &format!("start {entry:016x} {tree} {kind}\n"))?;
            return Some(Self {
                file: Arc::new(file),
                entry,
                stopped,
                whole: whole.then_some(tree),
            });
        }
        None
    }

    /// This restore's entry in the log, the tag of its temporary names.
    pub(super) fn entry(&self) -> u64 {
        self.entry
    }

    /// A share of this restore's lock, for each blocking task that writes files into
    /// place ([`Hold`]).
    pub(super) fn hold(&self) -> Hold {
        Hold(Arc::clone(&self.file))
    }

    /// The entries of the restores that had stopped when this one began.
    pub(super) fn stopped(&self) -> HashSet<u64> {
        self.stopped.iter().map(|(e, _)| *e).collect()
    }

    /// Appends this restore's `done` line, naming the stopped restores it made good if it
    /// wrote every file (`wrote_all`: a whole restore with no file failed); then, if no
    /// other restore holds the marker and no stopped restore is left that none made good,
    /// takes it away (if the name still is this marker: a snapshot may hold a file of
    /// that name at its top, restored over it).
    pub(super) fn finished(self, top: BorrowedFd<'_>, wrote_all: bool) {
        // Every writer has ended: the lock upgrade below must not act for one still
        // writing (a failed upgrade drops the shared lock its share relies on).
        debug_assert_eq!(
            Arc::strong_count(&self.file),
            1,
            "a writer still holds a share"
        );
        let mut line = format!("done {:016x}", self.entry);
        if wrote_all && let Some(tree) = &self.whole {
            for (e, _) in self.stopped.iter().filter(|(_, t)| t == tree) {
                let _ = write!(line, " {e:016x}");
            }
        }
        line.push('\n');
        if append(self.file.as_fd(), &line).is_none() {
            return;
        }
        // Another restore into this target still runs (its shared lock): it decides when
        // it ends.
        if rustix::fs::flock(self.file.as_fd(), FlockOperation::NonBlockingLockExclusive).is_err() {
            return;
        }
        let settled = open_now(self.file.as_fd()).is_some_and(|open| open.is_empty());
        // What the restores wrote reaches the disk before the marker goes: files were
        // created at their own names and renamed over old ones without a sync each, and
        // after a crash the marker must still be there unless they all are whole. Kept
        // when the sync fails.
        if settled && rustix::fs::syncfs(top).is_err() {
            return;
        }
        if let (true, Ok(ours)) = (settled, rustix::fs::fstat(self.file.as_fd())) {
            unlink_if_same(top, &ours);
        }
    }
}

/// A share of a restore's lock on the marker: the same open file, so the same `flock`,
/// which lasts until the last share is dropped. Each blocking task that writes files into
/// place holds one: if the restore's future is dropped (a library caller's timeout) while
/// such a task runs on, a restore that begins meanwhile does not take this one for
/// stopped (which would remove its temporary files and could count it made good while it
/// still renames files over that one's).
#[derive(Clone)]
pub(super) struct Hold(#[expect(dead_code, reason = "held for its lock, never read")] Arc<OwnedFd>);

/// Magic numbers (`statfs`) of network file systems: NFS, SMB, CIFS, SMB2, FUSE (sshfs
/// and others) and 9P. Appends from two machines may land on each other there, and locks
/// may be per machine.
const NETWORK: [u32; 6] = [
    0x6969,
    0x517B,
    0xFF53_4D42,
    0xFE53_4D42,
    0x6573_5546,
    0x0102_1997,
];

/// Whether `f_type` (of `statfs`, sign-extended on some platforms) is in [`NETWORK`].
fn on_network(f_type: i128) -> bool {
    u32::try_from(f_type & 0xFFFF_FFFF).is_ok_and(|t| NETWORK.contains(&t))
}

/// Removes the marker's name if it still is the file `st` (a snapshot may hold a file of
/// that name at its top, restored over it).
fn unlink_if_same(top: BorrowedFd<'_>, st: &rustix::fs::Stat) {
    if rustix::fs::statat(top, UNFINISHED, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|t| (t.st_dev, t.st_ino) == (st.st_dev, st.st_ino))
    {
        let _ = rustix::fs::unlinkat(top, UNFINISHED, AtFlags::empty());
    }
}

/// Removes from the open directory `dir` the temporary files of the restores `stopped`
/// ([`TEMP_PREFIX`], tagged with their entries): none of them can still be writing.
/// Whatever cannot be read or removed stays, as it would without this.
pub(super) fn remove_leftovers(dir: BorrowedFd<'_>, stopped: &HashSet<u64>) {
    let Ok(entries) = rustix::fs::Dir::read_from(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let tag = name
            .to_bytes()
            .strip_prefix(TEMP_PREFIX.as_bytes())
            .and_then(|rest| rest.split_at_checked(16))
            .filter(|(_, rest)| rest.first() == Some(&b'-'))
            .and_then(|(tag, _)| std::str::from_utf8(tag).ok())
            .and_then(|tag| u64::from_str_radix(tag, 16).ok());
        if tag.is_some_and(|t| stopped.contains(&t)) {
            let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
        }
    }
}

/// Appends `line` in one write (`O_APPEND`: lines of restores running at once do not mix).
fn append(file: BorrowedFd<'_>, line: &str) -> Option<()> {
    let n = rustix::io::write(file, line.as_bytes()).ok()?;
    (n == line.len()).then_some(())
}

/// The marker's open entries ([`open_entries`]) as its log holds them now; `None` if it
/// cannot be read.
fn open_now(file: BorrowedFd<'_>) -> Option<Vec<(u64, String)>> {
    let log = read_log(file)?;
    let open = open_entries(&log)?;
    Some(open.into_iter().map(|(e, t)| (e, t.to_owned())).collect())
}

/// The whole log, or `None` if it cannot be read or is longer than [`LOG_LIMIT`].
fn read_log(file: BorrowedFd<'_>) -> Option<Vec<u8>> {
    let mut log = vec![0u8; LOG_LIMIT + 1];
    let mut len = 0;
    while len < log.len() {
        match rustix::io::pread(file, &mut log[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    (len <= LOG_LIMIT).then(|| {
        log.truncate(len);
        log
    })
}

/// The entries of the log that started and neither ended nor were made good, with their
/// root trees; `None` if a line cannot be read (cut short by a crash, or a file of that
/// name that is no log), since then it cannot be told that none is left.
fn open_entries(log: &[u8]) -> Option<Vec<(u64, &str)>> {
    let text = std::str::from_utf8(log).ok()?;
    if text.is_empty() {
        return Some(Vec::new());
    }
    let mut started = Vec::new();
    let mut closed = HashSet::new();
    let entry = |s: &str| (s.len() == 16).then(|| u64::from_str_radix(s, 16).ok())?;
    for line in text.strip_suffix('\n')?.split('\n') {
        let mut words = line.split(' ');
        match words.next()? {
            "start" => {
                let e = entry(words.next()?)?;
                let tree = words.next()?;
                if !matches!(words.next()?, "whole" | "part") || words.next().is_some() {
                    return None;
                }
                started.push((e, tree));
            }
            "done" => {
                for w in words {
                    closed.insert(entry(w)?);
                }
            }
            _ => return None,
        }
    }
    started.retain(|(e, _)| !closed.contains(e));
    Some(started)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use rustix::fs::{Mode, OFlags};

    use super::{UNFINISHED, Unfinished, on_network, open_entries};
    use crate::id::Id;

    /// A restore's future dropped (a library caller's timeout) while its blocking writers
    /// still run: they hold its lock, so a restore that begins meanwhile does not take it
    /// for stopped (it would remove its temporary files and could count it made good
    /// while a writer still renames files into place), nor take the marker away.
    #[test]
    fn a_restore_whose_writers_still_run_after_it_was_dropped_is_not_taken_for_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let top = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let tree = Id::from_hex(&"ab".repeat(32)).unwrap();
        let dropped = Unfinished::mark(top.as_fd(), &tree, true).unwrap();
        let (entry, writer) = (dropped.entry(), dropped.hold());
        drop(dropped);

        let beside = Unfinished::mark(top.as_fd(), &tree, true).unwrap();
        assert!(beside.stopped().is_empty(), "a writer of it still runs");
        beside.finished(top.as_fd(), true);
        assert!(dir.path().join(UNFINISHED).is_file(), "the marker stays");

        drop(writer);
        let after = Unfinished::mark(top.as_fd(), &tree, true).unwrap();
        assert_eq!(after.stopped(), [entry].into());
    }

    #[test]
    fn nfs_and_smb2_are_network_file_systems_and_ext4_and_tmpfs_are_not() {
        assert!(on_network(0x6969));
        // SMB2's magic, 0xFE53_4D42, as a signed 32-bit `f_type` sign-extends it.
        assert!(on_network(-0x01AC_B2BE));
        assert!(on_network(0xFE53_4D42));
        assert!(!on_network(0xEF53));
        assert!(!on_network(0x0102_1994));
    }

    const T: &str = "aa";

    #[test]
    fn a_log_with_every_restore_ended_or_made_good_leaves_none_open() {
        let log = format!(
            "start 0000000000000001 {T} whole\nstart 0000000000000002 {T} part\n\
             done 0000000000000002\nstart 0000000000000003 {T} whole\n\
             done 0000000000000003 0000000000000001\n"
        );
        assert_eq!(open_entries(log.as_bytes()), Some(vec![]));
        assert_eq!(open_entries(b""), Some(vec![]));
    }

    #[test]
    fn a_restore_without_its_done_line_stays_open_with_its_tree() {
        let log = format!("start 00000000000000ff {T} part\nstart 0000000000000002 bb whole\n");
        assert_eq!(
            open_entries(log.as_bytes()),
            Some(vec![(0xff, T), (2, "bb")])
        );
    }

    #[test]
    fn a_line_cut_short_or_not_of_the_log_leaves_it_unreadable() {
        for bad in [
            "start 0000000000000001 aa whole",
            "start 0000000000000001 aa whole\ndone 00000000000000\n",
            "start 1 aa whole\n",
            "start 0000000000000001 aa\n",
            "hello\n",
            "\n",
            "done 0000000000000001\n\n",
        ] {
            assert_eq!(open_entries(bad.as_bytes()), None, "{bad:?}");
        }
    }
}

//! Writing one file's content: a new regular file (sparse, through direct I/O when it is
//! large, under a temporary name in its open directory, renamed over the old file), or an
//! open file or device from its start (zeros written where it may hold old data). Never
//! through a symlink that stands where the file goes, never opening a name that is there.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;
use rustix::fs::{AtFlags, Mode, OFlags};

use super::direct;
use super::fetch::fetch_ahead;
use super::unfinished::{Naming, TEMP_PREFIX};
use crate::error::{RepoError, Result};
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::Node;

/// Creates (or replaces) the regular file `name` in the open directory `dir` with
/// `node`'s content and metadata, sparse: written under a temporary name in `dir`,
/// created `0600` and exclusively (no name that is there is ever opened: a FIFO or a
/// device planted there is not touched), its metadata applied through the open file, then
/// renamed over `name`. So another hard link to the old file keeps the old content, the
/// old file's extended attributes and ACLs go with it, a file whose content fails keeps
/// its old version, and a symlink put where the file goes is replaced, never followed.
/// Files of `direct::DIRECT_MIN` bytes or more go through direct I/O where the file
/// system allows it. `path` names the file in messages. Returns the bytes written and the
/// metadata that could not be applied.
pub(super) async fn new_file<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    path: &Path,
    tag: u64,
) -> Result<(u64, Vec<String>)> {
    let (temp, (file, direct)) = open_temp_file(node, dir, path, Mode::from_raw_mode(0o600), tag)?;
    let written = if direct {
        // The writer takes a descriptor; this one stays for the metadata.
        match file.try_clone() {
            Ok(f) => write_file_direct(repo, node, f, path).await,
            Err(e) => Err(RepoError::io(path, e)),
        }
    } else {
        write_file(repo, node, &file, path, Holes::Skip).await
    };
    place(node, &file, (dir, &temp, name), path, written)
}

/// [`new_file`] for a file whose whole content is `data` (one chunk, read already with its
/// neighbours in the pack: `batch.rs`), written synchronously: for a blocking task that
/// writes many such files. With `naming.own` (the target is marked unfinished:
/// `unfinished.rs`) and nothing at `name`, the file is created there directly,
/// exclusively and with the mode [`create_mode`] gives, as a temporary one would be, and
/// removed again if it cannot be written whole; what is at `name` is still replaced
/// through a temporary name.
pub(super) fn place_file(
    node: &Node,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    path: &Path,
    data: &[u8],
    (naming, owner): (&Naming, Option<NewOwner>),
) -> Result<(u64, Vec<String>)> {
    let mode = create_mode(node, owner);
    if naming.own.is_some() {
        match rustix::fs::openat(dir, name, NEW_FILE, mode) {
            Ok(fd) => {
                let file = File::from(fd);
                let written = write_whole(node, &file, path, data)
                    .map(|n| (n, crate::fsmeta::apply_created(file.as_fd(), node)));
                return match written {
                    Err(e) if rustix::fs::unlinkat(dir, name, AtFlags::empty()).is_err() => {
                        // Short at its own name: the restore must not count as ended.
                        Err(RepoError::LeftShort {
                            path: path.display().to_string(),
                            why: e.to_string(),
                        })
                    }
                    written => written,
                };
            }
            // Something is there: replaced through a temporary name, below.
            Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(RepoError::io(path, e.into())),
        }
    }
    let (temp, (file, _)) = open_temp_file(node, dir, path, mode, naming.tag)?;
    let written = write_whole(node, &file, path, data);
    place(node, &file, (dir, &temp, name), path, written)
}

/// Writes `data`, the whole content of `node`, into the new file `file`.
fn write_whole(node: &Node, file: &File, path: &Path, data: &[u8]) -> Result<u64> {
    let len = data.len() as u64;
    file.write_all_at(data, 0)
        .map_err(|e| RepoError::io(path, e))
        .and_then(|()| check_length(node, len, path))
        .map(|()| len)
}

/// The owner a file created in a directory gets: the process's user, and the directory's
/// group where it is set-group-ID, else the process's.
#[derive(Clone, Copy)]
pub(super) struct NewOwner {
    uid: u32,
    gid: u32,
}

impl NewOwner {
    /// For files created in the open directory `dir`; `None` when it cannot be told.
    pub(super) fn in_dir(dir: BorrowedFd<'_>) -> Option<Self> {
        let st = rustix::fs::fstat(dir).ok()?;
        let gid = if st.st_mode & 0o2000 == 0 {
            rustix::process::getegid().as_raw()
        } else {
            st.st_gid
        };
        Some(Self {
            uid: rustix::process::geteuid().as_raw(),
            gid,
        })
    }
}

/// The mode a new file is created with: its final one where that lets no one read it who
/// may not read the restored file (it is created with the node's owner already, and has
/// no set-ID or sticky bit), and where its xattrs can still be written (it is writable by
/// its owner, or has none); else `0600`. Either way `fsmeta::apply_created` leaves the
/// owner and the mode alone only where they came out right (a umask or a default ACL may
/// take bits away).
fn create_mode(node: &Node, owner: Option<NewOwner>) -> Mode {
    let final_mode = owner.is_some_and(|o| (o.uid, o.gid) == (node.uid, node.gid))
        && node.mode & 0o7000 == 0
        && (node.mode & 0o200 != 0 || node.xattrs.as_ref().is_none_or(Vec::is_empty));
    Mode::from_raw_mode(if final_mode { node.mode & 0o777 } else { 0o600 })
}

/// Gives the file written under the temporary name `temp` in `dir` its metadata, then
/// renames it over `name`; removes it instead when it was not `written` or cannot be
/// renamed.
fn place(
    node: &Node,
    file: &File,
    (dir, temp, name): (BorrowedFd<'_>, &OsStr, &OsStr),
    path: &Path,
    written: Result<u64>,
) -> Result<(u64, Vec<String>)> {
    // Before the rename: the file appears under its name with its owner and mode.
    let placed = written.and_then(|n| {
        let meta_failed = crate::fsmeta::apply_created(file.as_fd(), node);
        rustix::fs::renameat(dir, temp, dir, name)
            .map(|()| (n, meta_failed))
            .map_err(|e| RepoError::io(path, e.into()))
    });
    if placed.is_err() {
        let _ = rustix::fs::unlinkat(dir, temp, AtFlags::empty());
    }
    placed
}

/// Flags of every file a restore creates: new (`O_EXCL`, so no name that is there is
/// opened), without following a symlink, without waiting (`O_NONBLOCK`: nothing planted
/// can make an open wait).
pub(super) const NEW_FILE: OFlags = OFlags::WRONLY
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);

/// Creates a new file in `dir` under a temporary name, for [`new_file`]: with direct I/O
/// (`true`) for a file of `direct::DIRECT_MIN` bytes or more where the file system allows
/// it.
fn open_temp_file(
    node: &Node,
    dir: BorrowedFd<'_>,
    path: &Path,
    mode: Mode,
    tag: u64,
) -> Result<(OsString, (File, bool))> {
    loop {
        let temp = OsString::from(format!("{TEMP_PREFIX}{tag:016x}-{:016x}", temp_number()?));
        let opened = if node.size.is_some_and(|n| n >= direct::DIRECT_MIN) {
            direct::create_at(dir, &temp)
        } else {
            Ok(None)
        };
        let opened = match opened {
            Ok(Some(f)) => Ok((f, true)),
            Ok(None) => rustix::fs::openat(dir, &temp, NEW_FILE, mode)
                .map(|fd| (File::from(fd), false))
                .map_err(std::io::Error::from),
            Err(e) => Err(e),
        };
        match opened {
            Ok(f) => return Ok((temp, f)),
            // Someone else's file under that name: another name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(RepoError::io(path, e)),
        }
    }
}

/// Makes an entry that is not a regular file's content (a symlink, a device node, FIFO or
/// socket, a further hard link) with `make` under a temporary name in `dir` (tagged `tag`,
/// as [`new_file`]'s), then renames it over `name`. Before, what stood at `name` was
/// removed first, and lost when the make failed (a device node without the privilege to
/// make one, a link across file systems). A directory at `name` stays: the rename refuses
/// it, as the removal did.
pub(super) fn make_over(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    tag: u64,
    make: impl Fn(&OsStr) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let temp = loop {
        let n = temp_number().map_err(std::io::Error::other)?;
        let temp = OsString::from(format!("{TEMP_PREFIX}{tag:016x}-{n:016x}"));
        match make(&temp) {
            Ok(()) => break temp,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    };
    let placed = rustix::fs::renameat(dir, &temp, dir, name);
    // Also after a rename that did nothing: a hard link renamed over another name of the
    // same file leaves both names.
    let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
    placed.map_err(Into::into)
}

/// The number in the next temporary name: one random start per process, counted up from
/// there (a `getrandom` per restored file cost 8% of a small-file restore's system time).
/// Guessing the next name gains nothing: files are created `O_EXCL`, and a name someone
/// else took is skipped.
pub(super) fn temp_number() -> Result<u64> {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    // Without a random start (the source failed), no names at all, as before.
    static START: OnceLock<Option<u64>> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = START
        .get_or_init(|| kura_keys::rand::u64().ok())
        .ok_or(RepoError::Random)?;
    Ok(start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)))
}

/// `O_NONBLOCK`: opening never waits (on a FIFO, for a reader that never comes).
pub(super) const NON_BLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits().cast_signed();

/// Removes a symlink `name` in `dir` where the snapshot puts a file or a directory.
/// Restoring into a target that has one (an in-place recovery, a second snapshot into the
/// same directory) would otherwise write through it, outside the target: `app/conf ->
/// /etc` and a snapshot's `app/conf/passwd`. Returns the removed link's target.
pub(super) fn unlink_symlink(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    path: &Path,
) -> Result<Option<PathBuf>> {
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())
                .map_err(|e| RepoError::io(path, e.into()))?;
            Ok(Some(PathBuf::from(OsStr::from_bytes(target.as_bytes()))))
        }
        Err(_) => Ok(None),
    }
}

/// Writes `n` zeros: a hole's bytes where the target cannot have holes.
pub(super) fn write_zeros(out: &mut impl Write, n: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let mut left = n;
    while left > 0 {
        let len = usize::try_from(left).map_or(ZEROS.len(), |l| l.min(ZEROS.len()));
        out.write_all(&ZEROS[..len])?;
        left -= len as u64;
    }
    Ok(())
}

/// Writes `n` zeros at offset `at`.
fn write_zeros_at(file: &File, at: u64, n: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let mut done = 0;
    while done < n {
        let len = usize::try_from(n - done).map_or(ZEROS.len(), |l| l.min(ZEROS.len()));
        file.write_all_at(&ZEROS[..len], at + done)?;
        done += len as u64;
    }
    Ok(())
}

/// What [`zero_range`] leaves to the device: stretches on this alignment (a multiple of
/// every common logical block size, and of the page size); the edges are written.
const DEVICE_BLOCK: u64 = 4096;

/// Makes `n` bytes at `at` read as zeros without writing them where the target can:
/// `fallocate(PUNCH_HOLE | KEEP_SIZE)` first, which on a block device is a write-zeroes
/// that may unmap (a loop device gives the blocks back) and never falls back to written
/// zeros; else, on a thin LV (`discard`: its block size), a discard of the whole thin
/// blocks (`PUNCH_HOLE | NO_HIDE_STALE`, the block layer's BLKDISCARD), which dm-thin
/// unmaps and reads back as zeros, the edges zeroed as below; else `ZERO_RANGE` (the block
/// layer's BLKZEROOUT: the device zeroes, maybe allocating); else zeros written, as a
/// device without any of these needs. Other devices get no discard: what they read
/// after one is not promised (the kernel dropped `discard_zeroes_data` for that).
fn zero_range(file: &File, at: u64, n: u64, discard: Option<u64>) -> std::io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    let start = at.next_multiple_of(DEVICE_BLOCK);
    let end = (at + n) / DEVICE_BLOCK * DEVICE_BLOCK;
    if end <= start {
        return write_zeros_at(file, at, n);
    }
    write_zeros_at(file, at, start - at)?;
    let keep = FallocateFlags::KEEP_SIZE;
    // What is left once PUNCH_HOLE failed on the whole range: it fails on any part too.
    let zero_out = |from: u64, to: u64| -> std::io::Result<()> {
        if to > from && fallocate(file, FallocateFlags::ZERO_RANGE | keep, from, to - from).is_err()
        {
            write_zeros_at(file, from, to - from)?;
        }
        Ok(())
    };
    let punched = fallocate(file, FallocateFlags::PUNCH_HOLE | keep, start, end - start).is_ok();
    if !punched {
        match discard.map(|g| (start.next_multiple_of(g), end / g * g)) {
            Some((d_start, d_end))
                if d_end > d_start
                    && fallocate(
                        file,
                        FallocateFlags::PUNCH_HOLE | keep | FallocateFlags::NO_HIDE_STALE,
                        d_start,
                        d_end - d_start,
                    )
                    .is_ok() =>
            {
                zero_out(start, d_start)?;
                zero_out(d_end, end)?;
            }
            _ => zero_out(start, end)?,
        }
    }
    write_zeros_at(file, end, at + n - end)
}

/// The block size of the thin LV `file` opens, if it is one: a device-mapper device
/// whose lower device is a thin pool (`…-tpool`), as LVM names them. Its unmapped blocks
/// read as zeros, so a discard of whole blocks zeroes them without allocating.
pub(super) fn thin_block(file: &File) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let rdev = file.metadata().ok()?.rdev();
    let sys = std::path::PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        rustix::fs::major(rdev),
        rustix::fs::minor(rdev)
    ));
    let slaves = std::fs::read_dir(sys.join("slaves")).ok()?;
    let on_pool = slaves.flatten().any(|s| {
        std::fs::read_to_string(s.path().join("dm/name"))
            .is_ok_and(|n| n.trim_end().ends_with("-tpool"))
    });
    let granularity: u64 = std::fs::read_to_string(sys.join("queue/discard_granularity"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (on_pool && granularity > 0).then_some(granularity)
}

/// How a restore treats the zero stretches a backup did not store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holes {
    /// Seek over them: a new regular file gets holes (sparse).
    Skip,
    /// Zero them ([`zero_range`]): a block device may hold old data there. A thin one is
    /// not filled: the device zeroes, unmapping where it can, rather than being written.
    /// With a thin LV's block size, whole blocks are discarded where write-zeroes fails.
    WriteZeros {
        /// The thin LV's block size, if the target is one ([`thin_block`]).
        discard: Option<u64>,
    },
}

/// Restores one file node into an open file or device, from its start.
pub(super) async fn write_file<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    f: &File,
    path: &Path,
    holes: Holes,
) -> Result<u64> {
    write_file_at(repo, node, f, path, holes, 0).await
}

/// Restores one file node into an open file or device from offset `base` on (a stretch
/// of an image, for `--only-changed-since`); returns the bytes it covered.
pub(super) async fn write_file_at<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    f: &File,
    path: &Path,
    holes: Holes,
    base: u64,
) -> Result<u64> {
    // Writes run on the blocking pool, at their offsets, one at a time in order; the
    // runtime thread stays free to receive the chunks being fetched meanwhile.
    let file = Arc::new(f.try_clone().map_err(|e| RepoError::io(path, e))?);
    let discard = match holes {
        Holes::WriteZeros { discard } => discard,
        Holes::Skip => None,
    };
    let write_at = |at: u64, data: Option<Bytes>, zeros: u64| {
        let file = file.clone();
        let path = path.to_path_buf();
        async move {
            tokio::task::spawn_blocking(move || match data {
                Some(d) => file.write_all_at(&d, at),
                None => zero_range(&file, at, zeros, discard),
            })
            .await
            .map_err(|e| RepoError::task("write task", &e))?
            .map_err(|e| RepoError::io(&path, e))
        }
    };
    let mut pos = base;
    let mut fetched = fetch_ahead(repo, node);
    while let Some(item) = fetched.next().await {
        match item? {
            (_, Some(data)) => {
                let len = data.len() as u64;
                write_at(pos, Some(data), 0).await?;
                pos += len;
                repo.progress.add_bytes(len);
            }
            (zero, None) => {
                if let Holes::WriteZeros { .. } = holes {
                    write_at(pos, None, zero).await?;
                }
                pos += zero;
                repo.progress.add_bytes(zero);
            }
        }
    }
    if holes == Holes::Skip {
        // A trailing hole needs the length set explicitly.
        file.set_len(pos).map_err(|e| RepoError::io(path, e))?;
    }
    check_length(node, pos - base, path)?;
    Ok(pos - base)
}

/// Restores one file node into a file opened for direct I/O, holes where whole blocks
/// are zero.
async fn write_file_direct<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    f: File,
    path: &Path,
) -> Result<u64> {
    let mut w = direct::DirectWriter::new(f);
    let mut pos = 0u64;
    let mut fetched = fetch_ahead(repo, node);
    while let Some(item) = fetched.next().await {
        let n = match item? {
            (_, Some(data)) => {
                w.push(&data).await.map_err(|e| RepoError::io(path, e))?;
                data.len() as u64
            }
            (zero, None) => {
                w.zeros(zero).await.map_err(|e| RepoError::io(path, e))?;
                zero
            }
        };
        pos += n;
        repo.progress.add_bytes(n);
    }
    w.finish(pos).await.map_err(|e| RepoError::io(path, e))?;
    check_length(node, pos, path)?;
    Ok(pos)
}

/// Refuses a restored file whose length is not the one its node records.
fn check_length(node: &Node, pos: u64, path: &Path) -> Result<()> {
    if node.size.is_some_and(|s| s != pos) {
        return Err(RepoError::corrupt(
            path.display().to_string(),
            "restored length differs from the snapshot",
        ));
    }
    Ok(())
}

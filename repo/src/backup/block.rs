//! `--block`: a device or image stored in fixed blocks (FORMAT.md sections 5.2 and 5.4),
//! reading only the blocks that can hold something new:
//!
//! - every block, by default;
//! - of an image file, only the data the file system reports (`SEEK_DATA`): its holes are
//!   zeros without being read;
//! - with `--allocated`, only the extents a `thin_dump` or CSI `GetMetadataAllocated`
//!   file lists: the rest is taken for zeros;
//! - with `--changed` and a parent, only the extents a `thin_delta` or CSI
//!   `GetMetadataDelta` file lists: the rest keeps the parent's blobs, where the index
//!   still holds them in a pack no prune has marked (otherwise they are read).
//!
//! Every `--verify-every`th run in a row that trusted such a file reads every block
//! instead and compares what it read with what the file and the parent said; blocks
//! that differ are stored as read and listed in the snapshot.
//!
//! Reads run ahead of the hashing on `READERS` threads, `O_DIRECT` into aligned buffers
//! where the source allows it (a busy node's page cache is not evicted by a 2 TB
//! read), through the page cache otherwise, each range dropped from it once read.
//! Memory: `READ_BUFFERS` buffers of `READ_SIZE` bytes.

use std::fs::File;
use std::os::fd::AsFd as _;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use super::chunk::push_entry;
use super::walk::Walker;
use crate::aligned::{ALIGN, Aligned};
use crate::blocks::Blocks;
use crate::error::{RepoError, Result};
use crate::extents::Extents;
use crate::id::Id;
use crate::snapshot::BlockRecord;
use crate::storage::Storage;
use crate::tree::{Content, Node};

/// Bytes per read (several blocks): a batch worth sharing between the hashing threads.
const READ_SIZE: usize = 16 << 20;
/// Threads reading ahead of the hashing, so that several reads are in flight.
const READERS: usize = 4;
/// Buffers in all: the reads in flight and the one being hashed.
const READ_BUFFERS: usize = READERS + 1;
/// Blocks not read, sent to the hashing thread in batches of this many.
const KNOWN_BATCH: usize = 4096;

/// Which blocks an extents file says matter.
#[derive(Clone, Debug)]
pub enum BlockMap {
    /// The extents that changed since the parent (`thin_delta`, CSI `GetMetadataDelta`,
    /// a list); the other blocks are the parent's.
    Changed(Extents),
    /// The extents allocated at all (`thin_dump`, CSI `GetMetadataAllocated`, a list);
    /// the other blocks read as zeros.
    Allocated(Extents),
}

/// How a `--block` backup chooses what to read.
#[derive(Clone, Debug, Default)]
pub struct BlockOptions {
    /// The source's identity, which an incremental's parent must share (a thin
    /// snapshot's name changes every night; its origin's does not): the path if `None`.
    pub source_id: Option<String>,
    /// An extents file, if any.
    pub map: Option<BlockMap>,
    /// Read every block on the Nth run in a row that trusts an extents file, and compare.
    pub verify_every: Option<u32>,
}

/// The parent of a block backup: its record and its one file node.
pub(super) struct ParentBlock<'a> {
    pub(super) record: Option<&'a BlockRecord>,
    pub(super) node: Option<&'a Node>,
    /// The parent snapshot is neither incomplete nor repaired ([`Parent::whole`]).
    ///
    /// [`Parent::whole`]: super::walk::Parent
    pub(super) whole: bool,
}

/// What a block read while verifying was taken to be without reading.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expected {
    /// Nothing: the extents said it changed (or it is not verified).
    Read,
    /// Its blob, or a hole.
    Was(Option<Id>),
}

/// A read being gathered: first block, blocks, what each was taken to be.
type Gathering = (u64, usize, Vec<Expected>);

/// What is done with one stretch of blocks.
enum Step {
    /// Blocks `first..first + n`, to read; with, when verifying, what each was taken to
    /// be without reading (`None` where the extents said it changed).
    Read {
        first: u64,
        n: usize,
        expected: Vec<Expected>,
    },
    /// Blocks not read, in order: each one's blob (from the parent) or a hole.
    Known(Vec<Option<Id>>),
}

/// A step on its way to the hashing thread: a read's buffer arrives on its own channel.
enum Planned {
    Read {
        first: u64,
        n: usize,
        expected: Vec<Expected>,
        done: Receiver<Result<(Aligned, usize)>>,
    },
    Known(Vec<Option<Id>>),
}

/// Which blocks are read, and what the others are.
enum Mode<'a> {
    /// Every block.
    All,
    /// Blocks touching these extents; the others are zeros.
    Zeros(&'a [(u64, u64)]),
    /// Blocks touching these extents; the others the parent's.
    Parent(&'a [(u64, u64)], Blocks<'a>),
}

/// The blocks of a source of `size` bytes, in steps, as `mode` says; every block read
/// when `verify`.
struct Planner<'a> {
    mode: Mode<'a>,
    verify: bool,
    size: u64,
    block: u64,
    per_read: usize,
    next: u64,
    count: u64,
    /// The first extent that may still touch a block at or after `next`.
    extent: usize,
    /// A block decided but not yet given out (it ended the step before it).
    pending: Option<(u64, (bool, Option<Id>))>,
}

impl Planner<'_> {
    /// Whether block `i` must be read, and what it is taken to be otherwise.
    fn decide(&mut self, i: u64) -> Result<(bool, Option<Id>)> {
        let start = i * self.block;
        let end = (start + self.block).min(self.size);
        let touched = |ranges: &[(u64, u64)], at: &mut usize| {
            while *at < ranges.len() && ranges[*at].0 + ranges[*at].1 <= start {
                *at += 1;
            }
            ranges.get(*at).is_some_and(|&(o, _)| o < end)
        };
        Ok(match &mut self.mode {
            Mode::All => (true, None),
            Mode::Zeros(ranges) => (touched(ranges, &mut self.extent), None),
            Mode::Parent(ranges, parent) => {
                let before = parent.next().unwrap_or_else(|| {
                    Err(RepoError::corrupt("parent image", "it has fewer blocks"))
                })?;
                (touched(ranges, &mut self.extent), before)
            }
        })
    }

    /// The next stretch: blocks to read (up to a read's worth) or blocks not read (up to a
    /// batch), whichever comes first.
    fn step(&mut self) -> Option<Result<Step>> {
        let mut read: Option<Gathering> = None;
        let mut known = Vec::new();
        loop {
            let (i, (changed, before)) = match self.pending.take() {
                Some(p) => p,
                None if self.next < self.count => {
                    let i = self.next;
                    self.next += 1;
                    match self.decide(i) {
                        Ok(d) => (i, d),
                        Err(e) => return Some(Err(e)),
                    }
                }
                None => break,
            };
            let to_read = changed || self.verify;
            let fits = if to_read {
                known.is_empty() && read.as_ref().is_none_or(|r| r.1 < self.per_read)
            } else {
                read.is_none() && known.len() < KNOWN_BATCH
            };
            if !fits {
                self.pending = Some((i, (changed, before)));
                break;
            }
            if to_read {
                let r = read.get_or_insert((i, 0, Vec::new()));
                r.1 += 1;
                r.2.push(if changed {
                    Expected::Read
                } else {
                    Expected::Was(before)
                });
            } else {
                known.push(before);
            }
        }
        if let Some((first, n, expected)) = read {
            return Some(Ok(Step::Read { first, n, expected }));
        }
        (!known.is_empty()).then_some(Ok(Step::Known(known)))
    }
}

/// The source opened twice: for direct reads where it allows them, and through the page
/// cache.
struct Source {
    direct: Option<File>,
    buffered: File,
}

impl Source {
    /// `buffered`, opened at `path`, and a direct descriptor beside it where it allows.
    fn new(buffered: File, path: &Path, block: u64) -> Self {
        // Direct reads need every offset aligned: blocks of a multiple of ALIGN.
        let direct = if block.is_multiple_of(ALIGN as u64) {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::DIRECT.bits().cast_signed())
                .open(path)
                .ok()
        } else {
            None
        };
        // Opened by its path again: a name swapped in between (a symlink to another
        // device) would be read in place of the source whose size was taken. Such a
        // second descriptor is dropped, and every read goes through the first.
        let same = |f: &File| {
            let (a, b) = (rustix::fs::fstat(&buffered), rustix::fs::fstat(f));
            a.ok().zip(b.ok()).is_some_and(|(a, b)| {
                (a.st_dev, a.st_ino, a.st_rdev) == (b.st_dev, b.st_ino, b.st_rdev)
            })
        };
        let direct = direct.filter(same);
        Self { direct, buffered }
    }

    /// Reads `len` bytes at `at` into `buf` (or fewer at the end), directly if it can.
    fn read(&self, buf: &mut Aligned, at: u64, len: usize) -> std::io::Result<usize> {
        if let Some(direct) = &self.direct {
            let asked = len.div_ceil(ALIGN) * ALIGN;
            match read_full(direct, &mut buf.slice_mut()[..asked], at) {
                Ok(n) => return Ok(n.min(len)),
                // Alignment the device wants more of than ALIGN: read through the cache.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {}
                Err(e) => return Err(e),
            }
        }
        let n = read_full(&self.buffered, &mut buf.slice_mut()[..len], at)?;
        // What was read through the cache leaves it, so that a large read does not evict
        // what the node's programs use.
        let _ = rustix::fs::fadvise(
            &self.buffered,
            at,
            std::num::NonZeroU64::new(n as u64),
            rustix::fs::Advice::DontNeed,
        );
        Ok(n)
    }
}

/// Reads until `buf` is full or the end.
fn read_full(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], at + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A read for a reader thread: where, how much, the buffer, and where the result goes.
struct Job {
    at: u64,
    len: usize,
    buf: Aligned,
    done: SyncSender<Result<(Aligned, usize)>>,
}

/// The data extents of the image file `file`, as `SEEK_DATA` and `SEEK_HOLE` report them;
/// `None` (read it all) where the file system does not answer them.
fn data_extents(file: &File, size: u64) -> Option<Vec<(u64, u64)>> {
    use rustix::fs::SeekFrom;
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < size {
        let data = match rustix::fs::seek(file, SeekFrom::Data(at)) {
            Ok(d) => d,
            // No data at or after `at`.
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return None,
        };
        let hole = rustix::fs::seek(file, SeekFrom::Hole(data)).ok()?.min(size);
        if hole <= data {
            break;
        }
        out.push((data, hole - data));
        at = hole;
    }
    Some(out)
}

/// What the planner needs, checked: the extents, the parent's blocks, the record's
/// start.
struct Choice<'a> {
    mode: Mode<'a>,
    verify: bool,
    record: BlockRecord,
}

/// Decides what to read, refusing a parent or an extents file that does not fit.
fn choose<'a>(
    opts: &'a BlockOptions,
    parent: Option<&'a ParentBlock<'a>>,
    seek_data: Option<&'a [(u64, u64)]>,
    source: String,
    size: u64,
    block: u64,
) -> Result<Choice<'a>> {
    let mut record = BlockRecord {
        source,
        size,
        block_size: block,
        read: "all".into(),
        ..BlockRecord::default()
    };
    let fits = |e: &Extents| -> Result<()> {
        if let Some(c) = e.capacity().filter(|&c| c != size) {
            return Err(RepoError::Extents(format!(
                "it is of a volume of {c} bytes; the source holds {size}"
            )));
        }
        // An extent may end past the source's end (the pool's last block may be larger
        // than what is left of the volume), but one that starts there is of another one.
        if let Some(&(o, l)) = e.ranges().last().filter(|r| r.0 >= size) {
            return Err(RepoError::Extents(format!(
                "the extent at {o} of {l} bytes lies past the source's {size} bytes: \
                 the file is of another volume"
            )));
        }
        Ok(())
    };
    let verify_at = |runs: u32| opts.verify_every.is_some_and(|n| runs >= n.max(1));
    let (mode, verify) = match &opts.map {
        None => match seek_data {
            Some(data) => {
                record.read = "seek_data".into();
                (Mode::Zeros(data), false)
            }
            None => (Mode::All, false),
        },
        Some(BlockMap::Allocated(e)) => {
            if e.format().lists_changes() == Some(true) {
                return Err(RepoError::Extents(format!(
                    "a {} file lists changes, not what is allocated: give it to --changed",
                    e.format().name()
                )));
            }
            fits(e)?;
            // Counted through a parent of the same source, so that nightly allocated-only
            // runs verify too.
            let runs = parent
                .and_then(|p| p.record)
                .filter(|b| b.source == record.source)
                .map_or(1, |b| b.trusted_runs.saturating_add(1));
            record.trusted_runs = runs;
            record.snapshot = e.of().map(str::to_string);
            let verify = verify_at(runs);
            record.read = format!(
                "{}:{}",
                if verify { "verified" } else { "allocated" },
                e.format().name()
            );
            (Mode::Zeros(e.ranges()), verify)
        }
        Some(BlockMap::Changed(e)) => {
            if e.format().lists_changes() == Some(false) {
                return Err(RepoError::Extents(format!(
                    "a {} file lists what is allocated, not changes: give it to --allocated",
                    e.format().name()
                )));
            }
            let p = parent.ok_or_else(|| {
                RepoError::WrongParent(
                    "--changed needs the parent snapshot the changes are since".into(),
                )
            })?;
            let (before, node) = parent_fits(p, &record)?;
            fits(e)?;
            chained(e, before)?;
            record.snapshot = e.of().map(str::to_string);
            let runs = before.trusted_runs.saturating_add(1);
            record.trusted_runs = runs;
            let verify = verify_at(runs);
            record.read = format!(
                "{}:{}",
                if verify { "verified" } else { "changed" },
                e.format().name()
            );
            let blocks = Blocks::new(node.content.as_deref().unwrap_or_default(), size, block)?;
            (Mode::Parent(e.ranges(), blocks), verify)
        }
    };
    if verify {
        record.trusted_runs = 0;
    }
    Ok(Choice {
        mode,
        verify,
        record,
    })
}

/// Refuses a delta between other snapshots than the parent's (yesterday's run failed, and
/// `latest` is the day before), which would keep old data where it changed; and one onto
/// a parent that does not say what it was taken of (a plain `--block` backup), which
/// therefore cannot be checked. Extents that name no snapshot (CSI, lists) pass: for them
/// the verifying runs are the check.
fn chained(e: &Extents, before: &BlockRecord) -> Result<()> {
    let Some(since) = e.since() else {
        return Ok(());
    };
    match before.snapshot.as_deref() {
        Some(parent_is) if parent_is == since => Ok(()),
        Some(parent_is) => Err(RepoError::WrongParent(format!(
            "the changes are since {since}, and the parent is of {parent_is}: \
             give the parent taken of {since}, or a delta since {parent_is}"
        ))),
        None => Err(RepoError::WrongParent(format!(
            "the changes are since {since}, and the parent does not record which device it \
             was taken of (a backup without --allocated or --changed): back this snapshot \
             up with --allocated (its thin_dump) once, which records it, and give deltas \
             since it after"
        ))),
    }
}

/// The parent's record and node, refused unless it is a block backup of the same source,
/// size and block size as `record`.
fn parent_fits<'a>(
    p: &ParentBlock<'a>,
    record: &BlockRecord,
) -> Result<(&'a BlockRecord, &'a Node)> {
    let (size, block) = (record.size, record.block_size);
    let (Some(before), Some(node)) = (p.record, p.node) else {
        return Err(RepoError::WrongParent(
            "the parent is not a block backup (or was written before kura recorded one)".into(),
        ));
    };
    if before.source != record.source {
        return Err(RepoError::WrongParent(format!(
            "the parent is of source {:?}, not {:?} (name it with --source-id)",
            before.source, record.source
        )));
    }
    if before.size != size || node.size != Some(size) {
        return Err(RepoError::WrongParent(format!(
            "the parent's source held {} bytes, this one {size}",
            before.size
        )));
    }
    if before.block_size != block {
        return Err(RepoError::WrongParent(format!(
            "the parent is in blocks of {} bytes, this repository's are {block}",
            before.block_size
        )));
    }
    // A repaired snapshot's lost blocks are holes, which this run would keep where the
    // changes say nothing changed: the device's data there would be in no later snapshot.
    if !p.whole {
        return Err(RepoError::WrongParent(
            "the parent is incomplete, was repaired (`repair snapshots`) or changed while it \
             was read: blocks it lost are holes in it, or may be torn; back up without \
             --changed (or with --allocated) to start again"
                .into(),
        ));
    }
    Ok((before, node))
}

impl<S: Storage> Walker<S> {
    /// The file node of the device or image at `path`, its blocks read as `opts` and the
    /// parent say; its record for the snapshot is kept in `self.block`.
    pub(super) fn block(
        &mut self,
        path: &Path,
        parent: Option<&ParentBlock<'_>>,
        opts: &BlockOptions,
    ) -> Result<Node> {
        let file = File::open(path).map_err(|e| RepoError::io(path, e))?;
        let meta = super::meta::Meta::of(file.as_fd()).map_err(|e| RepoError::io(path, e))?;
        // A block device's metadata says 0 bytes; its end says how large it is.
        let size = rustix::fs::seek(&file, rustix::fs::SeekFrom::End(0))
            .map_err(|e| RepoError::io(path, e.into()))?;
        let block = u64::from(self.packer.repo().config.params.block_size);
        let seek_data = if meta.kind == rustix::fs::FileType::BlockDevice {
            None
        } else {
            data_extents(&file, size)
        };
        let source = opts
            .source_id
            .clone()
            .unwrap_or_else(|| path.display().to_string());
        let choice = choose(opts, parent, seek_data.as_deref(), source, size, block)?;
        self.packer.repo().progress.set_total(size);
        let mut record = choice.record;
        let planner = Planner {
            mode: choice.mode,
            verify: choice.verify,
            size,
            block,
            per_read: usize::try_from((READ_SIZE as u64 / block).max(1)).unwrap_or(1),
            next: 0,
            count: Blocks::count(size, block),
            extent: 0,
            pending: None,
        };
        let source = Source::new(file, path, block);
        let content = self.read_planned(planner, &source, path, &mut record)?;
        let mut node = super::walk::node_from_meta(&meta, crate::tree::NodeType::File);
        node.set_name(path.file_name().unwrap_or(std::ffi::OsStr::new("device")));
        node.size = Some(size);
        node.content = Some(content);
        self.summary.files += 1;
        // An image file written to while it was read (a device's writes move nothing
        // `fstat` shows) is flagged as a tree's file is, not read again: it is large, and
        // should have been a frozen snapshot.
        if meta.kind != rustix::fs::FileType::BlockDevice {
            let now = super::meta::Meta::of(source.buffered.as_fd())
                .map_err(|e| RepoError::io(path, e))?;
            if super::read::changed_since(&meta, &now) {
                self.flag_changed(&mut node, path);
            }
        }
        self.block = Some(record);
        Ok(node)
    }

    /// Runs the plan: reads on reader threads, ahead; hashing, storing and comparing on
    /// this one, in order.
    fn read_planned(
        &mut self,
        mut planner: Planner<'_>,
        source: &Source,
        path: &Path,
        record: &mut BlockRecord,
    ) -> Result<Vec<Content>> {
        let (block, size) = (planner.block, planner.size);
        let read_len = planner.per_read * usize::try_from(block).unwrap_or(usize::MAX);
        let (free_tx, free_rx) = sync_channel::<Aligned>(READ_BUFFERS);
        for _ in 0..READ_BUFFERS {
            free_tx
                .send(Aligned::new(read_len.div_ceil(ALIGN) * ALIGN))
                .expect("the channel holds every buffer");
        }
        let (jobs_tx, jobs_rx) = sync_channel::<Job>(READ_BUFFERS);
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let (plan_tx, plan_rx) = sync_channel::<Result<Planned>>(READ_BUFFERS * 2);
        std::thread::scope(|scope| {
            for _ in 0..READERS {
                let jobs = jobs_rx.clone();
                scope.spawn(move || {
                    loop {
                        let Ok(Ok(job)) = jobs.lock().map(|j| j.recv()) else {
                            return;
                        };
                        let mut buf = job.buf;
                        let r = source
                            .read(&mut buf, job.at, job.len)
                            .map(|n| (buf, n))
                            .map_err(|e| RepoError::io(path, e));
                        let _ = job.done.send(r);
                    }
                });
            }
            scope.spawn(move || {
                while let Some(step) = planner.step() {
                    let next = match step {
                        Ok(Step::Known(k)) => Ok(Planned::Known(k)),
                        Ok(Step::Read { first, n, expected }) => {
                            let Ok(buf) = free_rx.recv() else { return };
                            let at = first * block;
                            let len = usize::try_from((n as u64 * block).min(size - at))
                                .unwrap_or(usize::MAX);
                            let (done_tx, done) = sync_channel(1);
                            let job = Job {
                                at,
                                len,
                                buf,
                                done: done_tx,
                            };
                            if jobs_tx.send(job).is_err() {
                                return;
                            }
                            Ok(Planned::Read {
                                first,
                                n,
                                expected,
                                done,
                            })
                        }
                        Err(e) => Err(e),
                    };
                    let failed = next.is_err();
                    if plan_tx.send(next).is_err() || failed {
                        return;
                    }
                }
            });
            let result = self.store_planned(&plan_rx, &free_tx, source, path, block, size, record);
            // Ends the planner (waiting to send, or for a buffer) and so the readers, if
            // this stopped early.
            drop(plan_rx);
            drop(free_tx);
            result
        })
    }

    /// Takes the planned steps in order: stores what was read, keeps what was not.
    #[allow(
        clippy::too_many_arguments,
        reason = "one call site; the pieces of one run"
    )]
    fn store_planned(
        &mut self,
        plan: &Receiver<Result<Planned>>,
        free: &SyncSender<Aligned>,
        source: &Source,
        path: &Path,
        block: u64,
        size: u64,
        record: &mut BlockRecord,
    ) -> Result<Vec<Content>> {
        let mut content: Vec<Content> = Vec::new();
        let mut at = 0u64;
        let mut spare: Option<Aligned> = None;
        while let Ok(planned) = plan.recv() {
            match planned? {
                Planned::Known(blocks) => {
                    for before in blocks {
                        let len = block.min(size - at);
                        match before {
                            Some(id) if !self.packer.has(&id) => {
                                // The parent's blob is gone or marked by a prune: read it.
                                let buf = spare.get_or_insert_with(|| {
                                    Aligned::new(
                                        usize::try_from(block).unwrap_or(0).div_ceil(ALIGN) * ALIGN,
                                    )
                                });
                                let ids = self.read_store(source, path, buf, at, 1, block, size)?;
                                push_entry(&mut content, len, ids[0]);
                                self.summary.bytes_read += len;
                            }
                            Some(id) => {
                                push_entry(&mut content, len, Some(id));
                                record.bytes_from_parent += len;
                            }
                            None => {
                                push_entry(&mut content, len, None);
                                record.bytes_unallocated += len;
                            }
                        }
                        at += len;
                    }
                }
                Planned::Read {
                    first,
                    n,
                    expected,
                    done,
                } => {
                    debug_assert_eq!(first * block, at);
                    let (buf, got) = done.recv().map_err(|_| RepoError::Task {
                        what: "block reader",
                        detail: "ended".into(),
                    })??;
                    let want = (n as u64 * block).min(size - at);
                    if (got as u64) < want {
                        return Err(RepoError::io(
                            path,
                            std::io::Error::other(format!(
                                "ended at byte {}, before its size of {size} bytes: it shrank while it was read",
                                at + got as u64
                            )),
                        ));
                    }
                    let ids = self.store_read(&buf, n, block, want)?;
                    let _ = free.send(buf);
                    for (k, id) in ids.into_iter().enumerate() {
                        let len = block.min(size - at);
                        if expected
                            .get(k)
                            .is_some_and(|e| matches!(e, Expected::Was(taken) if *taken != id))
                        {
                            merge_range(&mut record.mismatched, at, len);
                        }
                        push_entry(&mut content, len, id);
                        at += len;
                    }
                    self.summary.bytes_read += want;
                }
            }
            super::walk::report(&self.summary, &self.packer);
        }
        if at != size {
            return Err(RepoError::Task {
                what: "block planner",
                detail: format!("stopped at byte {at} of {size}"),
            });
        }
        Ok(content)
    }

    /// Reads `n` blocks at `at` with the page cache or directly, and stores them.
    #[allow(clippy::too_many_arguments, reason = "the pieces of one read")]
    fn read_store(
        &mut self,
        source: &Source,
        path: &Path,
        buf: &mut Aligned,
        at: u64,
        n: usize,
        block: u64,
        size: u64,
    ) -> Result<Vec<Option<Id>>> {
        let want = (n as u64 * block).min(size - at);
        let len = usize::try_from(want).unwrap_or(usize::MAX);
        let got = source
            .read(buf, at, len)
            .map_err(|e| RepoError::io(path, e))?;
        if got < len {
            return Err(RepoError::io(
                path,
                std::io::Error::other("it shrank while it was read"),
            ));
        }
        self.store_read(buf, n, block, want)
    }

    /// Stores the `n` blocks (`len` bytes) at the start of `buf`: each one's blob, or
    /// `None` for zeros.
    fn store_read(
        &mut self,
        buf: &Aligned,
        n: usize,
        block: u64,
        len: u64,
    ) -> Result<Vec<Option<Id>>> {
        let bytes = buf.slice(usize::try_from(len).unwrap_or(0));
        let block = usize::try_from(block).unwrap_or(usize::MAX);
        let blocks: Vec<(usize, usize, bool)> = (0..n)
            .map(|k| {
                let o = k * block;
                let l = block.min(bytes.len() - o);
                (o, l, bytes[o..o + l].iter().all(|&b| b == 0))
            })
            .collect();
        let data: Vec<(usize, usize)> = blocks
            .iter()
            .filter(|b| !b.2)
            .map(|&(o, l, _)| (o, l))
            .collect();
        let mut ids = self
            .chunker
            .data_chunks(&mut self.packer, bytes, &data)?
            .into_iter();
        Ok(blocks
            .into_iter()
            .map(|(_, _, zero)| if zero { None } else { ids.next() })
            .collect())
    }
}

/// Adds `(at, len)` to sorted ranges, merged with the last when they touch.
fn merge_range(ranges: &mut Vec<(u64, u64)>, at: u64, len: u64) {
    match ranges.last_mut() {
        Some((o, l)) if *o + *l == at => *l += len,
        _ => ranges.push((at, len)),
    }
}

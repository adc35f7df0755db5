//! Live counters of a running backup or restore, for a caller to display (the CLI draws
//! them as a progress bar on a terminal). Written with relaxed atomics by the worker and
//! read from any thread; they are a view, never an input to the work.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Counters shared by a [`crate::Repository`] handle and its clones.
#[derive(Debug)]
pub struct Progress {
    files: AtomicU64,
    bytes: AtomicU64,
    bytes_new: AtomicU64,
    total: AtomicU64,
    /// This host's clock minus the storage's, in seconds, as last measured; `i64::MIN`
    /// before any measurement.
    clock_skew: AtomicI64,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            bytes_new: AtomicU64::new(0),
            total: AtomicU64::new(0),
            clock_skew: AtomicI64::new(i64::MIN),
        }
    }
}

impl Progress {
    /// Files finished (backed up, or restored).
    pub fn files(&self) -> u64 {
        self.files.load(Relaxed)
    }

    /// Bytes read (backup) or written (restore) so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Bytes of new blobs a backup has stored (before compression).
    pub fn bytes_new(&self) -> u64 {
        self.bytes_new.load(Relaxed)
    }

    /// Bytes the operation will move in all, when known in advance (a device or image,
    /// one restored file); 0 when not.
    pub fn total(&self) -> u64 {
        self.total.load(Relaxed)
    }

    pub(crate) fn set(&self, files: u64, bytes: u64, bytes_new: u64) {
        self.files.store(files, Relaxed);
        self.bytes.store(bytes, Relaxed);
        self.bytes_new.store(bytes_new, Relaxed);
    }

    pub(crate) fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Relaxed);
    }

    pub(crate) fn add_file(&self) {
        self.files.fetch_add(1, Relaxed);
    }

    pub(crate) fn set_total(&self, total: u64) {
        self.total.store(total, Relaxed);
    }

    /// How many seconds this host's clock is ahead of the storage's (behind when
    /// negative), when that is more than the repository tolerates without a word
    /// (2 minutes): snapshot times come from this host's clock. `None` when within it, or
    /// not measured (only commands that take a lease or a session measure it).
    pub fn clock_skew(&self) -> Option<i64> {
        let skew = self.clock_skew.load(Relaxed);
        (skew != i64::MIN && skew.abs() > crate::clock::SKEW_WARNING_SECS).then_some(skew)
    }

    pub(crate) fn set_clock_skew(&self, skew: i64) {
        self.clock_skew.store(skew.max(i64::MIN + 1), Relaxed);
    }

    /// Zeroes every counter (a handle reused for a second operation).
    pub fn reset(&self) {
        self.set(0, 0, 0);
        self.set_total(0);
    }
}

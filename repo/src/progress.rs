//! Live counters of a running backup or restore, for a caller to display (the CLI draws
//! them as a progress bar on a terminal). Written with relaxed atomics by the worker and
//! read from any thread; they are a view, never an input to the work.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters shared by a [`crate::Repository`] handle and its clones.
#[derive(Debug, Default)]
pub struct Progress {
    files: AtomicU64,
    bytes: AtomicU64,
    bytes_new: AtomicU64,
    total: AtomicU64,
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

    /// Zeroes every counter (a handle reused for a second operation).
    pub fn reset(&self) {
        self.set(0, 0, 0);
        self.set_total(0);
    }
}

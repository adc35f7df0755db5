//! Buffers for direct I/O (`O_DIRECT`), which wants memory, offsets and lengths aligned
//! to the device's logical block; `ALIGN` (4096) covers every common one. Shared by the
//! restore's direct writes and the block backup's direct reads.

/// Alignment of offsets, lengths and memory for direct I/O.
pub const ALIGN: usize = 4096;

/// A buffer whose usable part starts on an `ALIGN` boundary: a `Vec` with room to spare,
/// and the offset of the first aligned byte in it. Moving it moves no bytes, so the
/// alignment holds wherever the buffer goes.
pub(crate) struct Aligned {
    vec: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    /// `len` usable bytes, zeroed.
    pub(crate) fn new(len: usize) -> Self {
        let vec = vec![0u8; len + ALIGN];
        let start = vec.as_ptr().align_offset(ALIGN);
        Self { vec, start, len }
    }

    /// The first `len` usable bytes.
    pub(crate) fn slice(&self, len: usize) -> &[u8] {
        &self.vec[self.start..self.start + len]
    }

    /// All the usable bytes.
    pub(crate) fn slice_mut(&mut self) -> &mut [u8] {
        &mut self.vec[self.start..self.start + self.len]
    }
}

//! The buffer every [`Transform`](crate::Transform) writes into: output appended at the end,
//! and room handed to the AEAD to write ciphertext or plaintext into directly.
//!
//! Room must be initialised memory before the AEAD may write into it (safe Rust has no
//! `&mut [u8]` over uninitialised bytes), and zeroing it on every use cost 4-7 % of the
//! gateway's CPU. An `Output` therefore remembers how far its memory was ever initialised
//! and zeroes only beyond that mark; reused buffers (see `crate::stream`) are zeroed once
//! in their life.

use std::ops::Deref;

/// Output of a [`Transform`](crate::Transform): the bytes written so far, readable as a
/// slice.
#[derive(Default)]
pub struct Output {
    /// `buf.len()` is the initialised mark, not the output's length.
    buf: Vec<u8>,
    len: usize,
}

impl Output {
    /// An empty output.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty output over `buf`, whose initialised bytes are reused as room without
    /// zeroing them again.
    pub(crate) fn reuse(buf: Vec<u8>) -> Self {
        Self { buf, len: 0 }
    }

    /// Bytes written.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets the output, keeping the memory for reuse.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The output as a vector.
    #[must_use]
    pub fn into_vec(mut self) -> Vec<u8> {
        self.buf.truncate(self.len);
        self.buf
    }

    /// The buffer and the length of its output, for handing the memory on as it is.
    pub(crate) fn into_parts(self) -> (Vec<u8>, usize) {
        (self.buf, self.len)
    }

    /// `n` bytes of room after the output, initialised but not part of it until
    /// [`Output::commit`]; their contents are unspecified.
    pub(crate) fn room(&mut self, n: usize) -> &mut [u8] {
        let end = self.len + n;
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        &mut self.buf[self.len..end]
    }

    /// Makes the first `n` bytes of the room part of the output.
    pub(crate) fn commit(&mut self, n: usize) {
        debug_assert!(self.len + n <= self.buf.len(), "commit past the room");
        self.len += n;
    }

    /// Appends `bytes`.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.room(bytes.len()).copy_from_slice(bytes);
        self.commit(bytes.len());
    }
}

impl Deref for Output {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::Output;

    #[test]
    fn room_is_not_output_until_committed() {
        let mut out = Output::new();
        out.extend_from_slice(b"ab");
        out.room(4).copy_from_slice(b"cdef");
        assert_eq!(&out[..], b"ab");
        out.commit(2);
        assert_eq!(&out[..], b"abcd");
        assert_eq!(out.into_vec(), b"abcd");
    }

    #[test]
    fn reused_memory_is_overwritten_not_leaked() {
        let mut out = Output::reuse(b"stale bytes".to_vec());
        assert!(out.is_empty());
        out.extend_from_slice(b"new");
        assert_eq!(&out[..], b"new");
        out.clear();
        assert_eq!(out.len(), 0);
        assert_eq!(out.into_vec(), b"");
    }
}

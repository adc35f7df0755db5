//! Random-access reads (SPEC 6.2): opening just the segments that cover a plaintext range.

use crate::header::PayloadKey;
use crate::layout::{Layout, SegmentPos};
use crate::segment;
use crate::transform::Transform;
use crate::{Error, Result};

/// The ciphertext bytes to fetch for a range: `start..=end`, offsets in the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CiphertextRange {
    /// First body byte to fetch.
    pub start: u64,
    /// Last body byte to fetch (inclusive).
    pub end: u64,
}

/// Decrypts the ciphertext of [`RangeOpener::new`]'s range and emits exactly plaintext
/// bytes `start..=end`, each authenticated, each segment checked to be the one that
/// belongs at its place.
pub struct RangeOpener<K> {
    key: K,
    layout: Layout,
    next: Option<SegmentPos>,
    skip: usize,
    remaining: u64,
    buf: Vec<u8>,
}

impl<K: AsRef<PayloadKey>> RangeOpener<K> {
    /// Plans the read of plaintext bytes `start..=end` of an object with `layout`.
    ///
    /// # Errors
    /// [`Error::RangeNotSatisfiable`] for a range outside the object.
    pub fn new(key: K, layout: Layout, start: u64, end: u64) -> Result<(Self, CiphertextRange)> {
        let (first, ct_start, ct_end) = layout.ciphertext_range(start, end)?;
        let skip = usize::try_from(start - first.plaintext_offset)
            .map_err(|_| Error::Malformed("range start outside its segment"))?;
        let opener = Self {
            key,
            layout,
            next: Some(first),
            skip,
            remaining: end - start + 1,
            buf: Vec::new(),
        };
        Ok((
            opener,
            CiphertextRange {
                start: ct_start,
                end: ct_end,
            },
        ))
    }
}

impl<K: AsRef<PayloadKey>> Transform for RangeOpener<K> {
    fn update(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        while !input.is_empty() {
            let Some(pos) = self.next.filter(|_| self.remaining > 0) else {
                return Err(Error::Malformed("more ciphertext than the range needs"));
            };
            let len = usize::try_from(pos.ciphertext_len()).expect("a segment is small");
            let take = (len - self.buf.len()).min(input.len());
            self.buf.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.buf.len() < len {
                continue;
            }
            let plain = segment::open_in_place(self.key.as_ref(), pos.id, &mut self.buf)?;
            let from = std::mem::take(&mut self.skip);
            let n = usize::try_from(self.remaining.min((plain.len() - from) as u64))
                .expect("within a segment");
            out.extend_from_slice(&plain[from..from + n]);
            self.remaining -= n as u64;
            self.buf.clear();
            self.next = self.layout.next(&pos);
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<()> {
        if self.remaining > 0 {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
}

impl AsRef<PayloadKey> for PayloadKey {
    fn as_ref(&self) -> &PayloadKey {
        self
    }
}

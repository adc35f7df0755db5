//! Random-access reads (SPEC 6.2): opening just the segments that cover a plaintext range.

use bytes::BytesMut;

use crate::cipher::AeadKey;
use crate::format::{PART_NONCE_SIZE, SEGMENT_PREFIX_SIZE};
use crate::header::PayloadKey;
use crate::layout::{Layout, SegmentPos};
use crate::segment::{self, PartNonce};
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
/// belongs at its place, and each part's segments checked to come from one upload.
pub struct RangeOpener<K> {
    key: K,
    layout: Layout,
    next: Option<SegmentPos>,
    skip: usize,
    remaining: u64,
    buf: Vec<u8>,
    part: Option<(u32, PartNonce, AeadKey)>,
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
            part: None,
        };
        Ok((
            opener,
            CiphertextRange {
                start: ct_start,
                end: ct_end,
            },
        ))
    }

    fn open_segment(&mut self, pos: SegmentPos, out: &mut BytesMut) -> Result<()> {
        if self.part.as_ref().is_none_or(|(p, ..)| *p != pos.id.part) {
            // First segment of this part in the range: its prefix names the part nonce,
            // which open_in_place then checks along with everything else.
            let nonce: PartNonce =
                crate::be::array_at(&self.buf, SEGMENT_PREFIX_SIZE - PART_NONCE_SIZE);
            let key = self.key.as_ref().part_key(pos.id.part, nonce);
            self.part = Some((pos.id.part, nonce, key));
        }
        let Some((_, nonce, key)) = &self.part else {
            return Err(pos.id.tampered());
        };
        let plain = segment::open_in_place(key, pos.id, *nonce, &mut self.buf)?;
        let from = std::mem::take(&mut self.skip);
        let n = usize::try_from(self.remaining.min((plain.len() - from) as u64)).unwrap_or(0);
        out.extend_from_slice(&plain[from..from + n]);
        self.remaining -= n as u64;
        Ok(())
    }
}

impl<K: AsRef<PayloadKey>> Transform for RangeOpener<K> {
    fn update(&mut self, mut input: &[u8], out: &mut BytesMut) -> Result<()> {
        while !input.is_empty() {
            let Some(pos) = self.next.filter(|_| self.remaining > 0) else {
                return Err(Error::Malformed("more ciphertext than the range needs"));
            };
            let len = usize::try_from(pos.ciphertext_len()).unwrap_or(usize::MAX);
            let take = (len - self.buf.len()).min(input.len());
            self.buf.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.buf.len() < len {
                continue;
            }
            self.open_segment(pos, out)?;
            self.buf.clear();
            self.next = self.layout.next(&pos);
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut BytesMut) -> Result<()> {
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

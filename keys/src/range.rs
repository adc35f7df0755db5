//! Random-access reads (SPEC 6.2): opening just the segments that cover a plaintext range.

use crate::Output;
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

    /// The key of `pos`'s part, derived when the range enters the part from the nonce in
    /// `segment`'s prefix (which opening the segment then checks with everything else).
    /// Takes the fields it needs, so that `segment` may be the opener's own buffer.
    fn part_key<'a>(
        part: &'a mut Option<(u32, PartNonce, AeadKey)>,
        key: &K,
        pos: SegmentPos,
        segment: &[u8],
    ) -> (PartNonce, &'a AeadKey) {
        let entry = match part.take() {
            Some(entry) if entry.0 == pos.id.part => entry,
            _ => {
                let nonce: PartNonce =
                    crate::be::array_at(segment, SEGMENT_PREFIX_SIZE - PART_NONCE_SIZE);
                (
                    pos.id.part,
                    nonce,
                    key.as_ref().part_key(pos.id.part, nonce),
                )
            }
        };
        let (_, nonce, key) = part.insert(entry);
        (*nonce, key)
    }

    /// Whether all of `pos`'s plaintext belongs to the range, so it can be decrypted
    /// straight into the output from the input, without a copy into `buf` first.
    fn wants_whole(&self, pos: SegmentPos) -> bool {
        self.skip == 0 && self.remaining >= pos.plaintext_len
    }

    fn open_segment(&mut self, pos: SegmentPos, out: &mut Output) -> Result<()> {
        let (nonce, key) = Self::part_key(&mut self.part, &self.key, pos, &self.buf);
        let plain = segment::open_in_place(key, pos.id, nonce, &mut self.buf)?;
        let from = std::mem::take(&mut self.skip);
        let n = usize::try_from(self.remaining.min((plain.len() - from) as u64)).unwrap_or(0);
        out.extend_from_slice(&plain[from..from + n]);
        self.remaining -= n as u64;
        Ok(())
    }
}

impl<K: AsRef<PayloadKey>> Transform for RangeOpener<K> {
    fn update(&mut self, mut input: &[u8], out: &mut Output) -> Result<()> {
        while !input.is_empty() {
            let Some(pos) = self.next.filter(|_| self.remaining > 0) else {
                return Err(Error::Malformed("more ciphertext than the range needs"));
            };
            let len = usize::try_from(pos.ciphertext_len()).unwrap_or(usize::MAX);
            if self.buf.is_empty() && input.len() >= len && self.wants_whole(pos) {
                let (segment, rest) = input.split_at(len);
                let (nonce, key) = Self::part_key(&mut self.part, &self.key, pos, segment);
                segment::open_append(key, pos.id, nonce, segment, out)?;
                self.remaining -= pos.plaintext_len;
                input = rest;
                self.next = self.layout.next(&pos);
                continue;
            }
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

    fn finish(&mut self, _out: &mut Output) -> Result<()> {
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

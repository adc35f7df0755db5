//! One segment (SPEC 5.2): its clear prefix, its nonce, and sealing or opening it.

use crate::format::{
    FINAL_FLAG, MAX_PART_NUMBER, NONCE_SIZE, SEGMENT_PREFIX_SIZE, SEGMENT_SIZE, TRAILER_MARKER,
};
use crate::header::PayloadKey;
use crate::{Error, Result};

/// Where a segment belongs: part number, index within the part, and whether it is the
/// part's last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentId {
    /// Part number, 1 to `MAX_PART_NUMBER`.
    pub part: u32,
    /// Index within the part, from 0.
    pub index: u64,
    /// Whether this is the last segment of its part.
    pub last: bool,
}

impl SegmentId {
    /// `nonce = u32(part) || u56(index) || (FINAL ? 1 : 0)`.
    pub(crate) fn nonce(self) -> [u8; NONCE_SIZE] {
        let mut n = [0u8; NONCE_SIZE];
        n[..4].copy_from_slice(&self.part.to_be_bytes());
        n[4..11].copy_from_slice(&self.index.to_be_bytes()[1..]);
        n[11] = u8::from(self.last);
        n
    }

    pub(crate) fn tampered(self) -> Error {
        Error::TamperedSegment {
            part: self.part,
            index: self.index,
        }
    }
}

/// A parsed segment prefix: the clear fields a walking reader needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prefix {
    Segment { part: u32, last: bool, len: usize },
    Trailer { table_len: usize },
}

pub(crate) fn encode_prefix(part: u32, last: bool, len: usize) -> [u8; SEGMENT_PREFIX_SIZE] {
    debug_assert!(len <= SEGMENT_SIZE);
    let flags_len = if last { FINAL_FLAG } else { 0 }
        | u32::try_from(len).expect("segment length fits 17 bits");
    let mut p = [0u8; SEGMENT_PREFIX_SIZE];
    p[..4].copy_from_slice(&part.to_be_bytes());
    p[4..].copy_from_slice(&flags_len.to_be_bytes());
    p
}

/// Parses and checks the structural rules of a prefix (lengths and part number ranges).
pub(crate) fn parse_prefix(p: [u8; SEGMENT_PREFIX_SIZE]) -> Result<Prefix> {
    let part = crate::be::u32_at(&p, 0);
    let word = crate::be::u32_at(&p, 4);
    if part == TRAILER_MARKER {
        return Ok(Prefix::Trailer {
            table_len: word as usize,
        });
    }
    if part == 0 || part > MAX_PART_NUMBER {
        return Err(Error::Malformed("part number out of range"));
    }
    let last = word & FINAL_FLAG != 0;
    let len = (word & !FINAL_FLAG) as usize;
    if len > SEGMENT_SIZE || (!last && len != SEGMENT_SIZE) {
        return Err(Error::Malformed("impossible segment length"));
    }
    Ok(Prefix::Segment { part, last, len })
}

/// Appends the sealed segment for `plaintext` to `out`.
pub(crate) fn seal_into(key: &PayloadKey, id: SegmentId, plaintext: &[u8], out: &mut Vec<u8>) {
    let prefix = encode_prefix(id.part, id.last, plaintext.len());
    out.extend_from_slice(&prefix);
    let start = out.len();
    out.extend_from_slice(plaintext);
    key.aead.seal_append(id.nonce(), &prefix, out, start);
}

/// Opens one whole segment (prefix, ciphertext, tag) in place, checking that it is the
/// segment `id` expects; returns the plaintext.
pub(crate) fn open_in_place<'a>(
    key: &PayloadKey,
    id: SegmentId,
    segment: &'a mut [u8],
) -> Result<&'a mut [u8]> {
    let (prefix, body) = segment.split_at_mut(SEGMENT_PREFIX_SIZE);
    let prefix: [u8; SEGMENT_PREFIX_SIZE] = (&*prefix).try_into().expect("split at prefix size");
    match parse_prefix(prefix) {
        Ok(Prefix::Segment { part, last, len })
            if part == id.part
                && last == id.last
                && body.len() == len + crate::format::TAG_SIZE => {}
        _ => return Err(id.tampered()),
    }
    key.aead
        .open(id.nonce(), &prefix, body)
        .map_err(|_| id.tampered())
}

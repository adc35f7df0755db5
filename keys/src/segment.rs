//! One segment (SPEC 5.2): its clear prefix, its nonce, and sealing or opening it.

use crate::Output;
use crate::cipher::AeadKey;
use crate::format::{
    FINAL_FLAG, MAX_PART_NUMBER, NONCE_SIZE, PART_NONCE_SIZE, SEGMENT_PREFIX_SIZE, SEGMENT_SIZE,
    TAG_SIZE, TRAILER_MARKER,
};
use crate::{Error, Result};

/// The part nonce `R` of one upload of a part (SPEC 5.2).
pub type PartNonce = [u8; PART_NONCE_SIZE];

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
    Segment {
        part: u32,
        last: bool,
        len: usize,
        nonce: PartNonce,
    },
    Trailer,
}

pub(crate) fn encode_prefix(
    part: u32,
    last: bool,
    len: usize,
    nonce: PartNonce,
) -> [u8; SEGMENT_PREFIX_SIZE] {
    debug_assert!(len <= SEGMENT_SIZE);
    // SEGMENT_SIZE fits 17 bits, so the length never reaches the FINAL bit.
    let len = u32::try_from(len).unwrap_or(0) & !FINAL_FLAG;
    let flags_len = if last { FINAL_FLAG } else { 0 } | len;
    let mut p = [0u8; SEGMENT_PREFIX_SIZE];
    p[..4].copy_from_slice(&part.to_be_bytes());
    p[4..8].copy_from_slice(&flags_len.to_be_bytes());
    p[8..].copy_from_slice(&nonce);
    p
}

/// Parses a prefix and checks its structural rules (lengths, part number range). A prefix
/// that breaks them is an altered segment; the caller names which one it expected.
pub(crate) fn parse_prefix(p: &[u8; SEGMENT_PREFIX_SIZE]) -> Option<Prefix> {
    let part = crate::be::u32_at(p, 0);
    let word = crate::be::u32_at(p, 4);
    if part == TRAILER_MARKER {
        return Some(Prefix::Trailer);
    }
    let last = word & FINAL_FLAG != 0;
    let len = (word & !FINAL_FLAG) as usize;
    let valid = part != 0
        && part <= MAX_PART_NUMBER
        && len <= SEGMENT_SIZE
        && (last || len == SEGMENT_SIZE);
    valid.then(|| Prefix::Segment {
        part,
        last,
        len,
        nonce: crate::be::array_at(p, 8),
    })
}

/// Appends the sealed segment for `plaintext` to `out`.
pub(crate) fn seal_into(
    key: &AeadKey,
    id: SegmentId,
    nonce: PartNonce,
    plaintext: &[u8],
    out: &mut Output,
) {
    let prefix = encode_prefix(id.part, id.last, plaintext.len(), nonce);
    out.extend_from_slice(&prefix);
    // Sealed out of place: the AEAD reads the plaintext once, where it lies, and writes the
    // ciphertext once, into room that needs no copy or zeroing first.
    let sealed = plaintext.len() + TAG_SIZE;
    key.seal_to(id.nonce(), &prefix, plaintext, out.room(sealed));
    out.commit(sealed);
}

/// Checks that `prefix` opens the segment `id` with part nonce `nonce`, whose ciphertext and
/// tag (`sealed_len` bytes) follow it.
fn check_prefix(
    id: SegmentId,
    nonce: PartNonce,
    prefix: &[u8; SEGMENT_PREFIX_SIZE],
    sealed_len: usize,
) -> Result<()> {
    match parse_prefix(prefix) {
        Some(Prefix::Segment {
            part,
            last,
            len,
            nonce: r,
        }) if part == id.part && last == id.last && r == nonce && sealed_len == len + TAG_SIZE => {
            Ok(())
        }
        _ => Err(id.tampered()),
    }
}

/// Checks that a whole segment (prefix, ciphertext, tag) is the segment `id` with part
/// nonce `nonce`, opens it in place, and returns the plaintext.
pub(crate) fn open_in_place<'a>(
    key: &AeadKey,
    id: SegmentId,
    nonce: PartNonce,
    segment: &'a mut [u8],
) -> Result<&'a mut [u8]> {
    let Some((prefix, body)) = segment.split_first_chunk_mut::<SEGMENT_PREFIX_SIZE>() else {
        return Err(Error::Truncated);
    };
    check_prefix(id, nonce, prefix, body.len())?;
    let prefix = *prefix;
    key.open(id.nonce(), &prefix, body)
        .map_err(|_| id.tampered())
}

/// As [`open_in_place`], but decrypts from `segment` where it lies and appends the
/// plaintext to `out`; on failure `out` is left as it was.
pub(crate) fn open_append(
    key: &AeadKey,
    id: SegmentId,
    nonce: PartNonce,
    segment: &[u8],
    out: &mut Output,
) -> Result<()> {
    let Some((prefix, sealed)) = segment.split_first_chunk::<SEGMENT_PREFIX_SIZE>() else {
        return Err(Error::Truncated);
    };
    check_prefix(id, nonce, prefix, sealed.len())?;
    key.open_append(id.nonce(), prefix, sealed, out)
        .map_err(|_| id.tampered())
}

//! The trailer of irregular layouts (SPEC 5.3): writing it and reading it back.

use crate::format::{
    FULL_SEGMENT_SIZE, HEADER_SIZE, MAX_PART_NUMBER, NONCE_SIZE, TAG_SIZE, TRAILER_HEAD_SIZE,
    TRAILER_MARKER, TRAILER_RESIDUE,
};
use crate::header::PayloadKey;
use crate::layout::{Layout, PartInfo, trailer_padding};
use crate::{Error, Result};

const ENTRY_SIZE: usize = 12;
const LEN_FIELD: usize = 8;
const MIN_TRAILER_LEN: usize = TRAILER_HEAD_SIZE + 4 + ENTRY_SIZE + TAG_SIZE + LEN_FIELD;
/// The longest trailer a reader accepts: a full table plus the most padding.
pub const MAX_TRAILER_LEN: usize = TRAILER_HEAD_SIZE
    + 4
    + ENTRY_SIZE * MAX_PART_NUMBER as usize
    + TAG_SIZE
    + FULL_SEGMENT_SIZE
    + LEN_FIELD;

fn tampered() -> Error {
    Error::TamperedSegment {
        part: TRAILER_MARKER,
        index: 0,
    }
}

/// The trailer for a body whose header and parts are `body_len` bytes long.
///
/// # Errors
/// [`Error::Malformed`] for a table that [`Layout::table`] rejects, or a `body_len` that
/// does not match it; [`Error::Random`] if the system generator fails.
pub fn encode(key: &PayloadKey, parts: &[PartInfo], body_len: u64) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE_SIZE];
    crate::rand::fill(&mut nonce)?;
    encode_with_nonce(key, parts, body_len, nonce)
}

/// [`encode`] with a chosen nonce, for reproducible test vectors only.
///
/// # Errors
/// As [`encode`].
#[cfg(feature = "vectors")]
#[doc(hidden)]
pub fn encode_for_vectors(
    key: &PayloadKey,
    parts: &[PartInfo],
    body_len: u64,
    nonce: [u8; NONCE_SIZE],
) -> Result<Vec<u8>> {
    encode_with_nonce(key, parts, body_len, nonce)
}

fn encode_with_nonce(
    key: &PayloadKey,
    parts: &[PartInfo],
    body_len: u64,
    nonce: [u8; NONCE_SIZE],
) -> Result<Vec<u8>> {
    let layout = Layout::table(parts)?;
    if layout.body_len_without_trailer() != body_len {
        return Err(Error::Malformed(
            "body length does not match the layout table",
        ));
    }
    let mut table = Vec::with_capacity(4 + ENTRY_SIZE * parts.len());
    // Layout::table checked count <= MAX_PART_NUMBER, so both lengths fit a u32.
    table.extend_from_slice(&u32::try_from(parts.len()).unwrap_or(u32::MAX).to_be_bytes());
    for p in parts {
        table.extend_from_slice(&p.number.to_be_bytes());
        table.extend_from_slice(&p.len.to_be_bytes());
    }
    let mut out = Vec::with_capacity(MAX_TRAILER_LEN.min(table.len() + 2 * FULL_SEGMENT_SIZE));
    out.extend_from_slice(&TRAILER_MARKER.to_be_bytes());
    out.extend_from_slice(&u32::try_from(table.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&nonce);
    let aad: [u8; TRAILER_HEAD_SIZE] = crate::be::array_at(&out, 0);
    let start = out.len();
    out.extend_from_slice(&table);
    key.trailer_key().seal_append(nonce, &aad, &mut out, start);
    let padding = trailer_padding(body_len + (out.len() + LEN_FIELD) as u64);
    out.resize(out.len() + usize::try_from(padding).unwrap_or(0), 0);
    let total = (out.len() + LEN_FIELD) as u64;
    out.extend_from_slice(&total.to_be_bytes());
    Ok(out)
}

/// Reads `trailer_len` from the last 8 bytes of a body of `body_len` bytes, after checking
/// that the body's size carries the trailer residue.
///
/// # Errors
/// [`Error::Malformed`] when the residue or the length is impossible.
pub fn trailer_len(last8: &[u8; 8], body_len: u64) -> Result<u64> {
    let residue = body_len.saturating_sub(HEADER_SIZE as u64) % FULL_SEGMENT_SIZE as u64;
    let len = u64::from_be_bytes(*last8);
    if residue != TRAILER_RESIDUE
        || len < MIN_TRAILER_LEN as u64
        || len > MAX_TRAILER_LEN as u64
        || len > body_len.saturating_sub(HEADER_SIZE as u64)
    {
        return Err(Error::Malformed("no valid trailer at the end of the body"));
    }
    Ok(len)
}

/// Opens a whole trailer and returns the layout it records, checked against the length
/// of the body it ends (`body_len`, trailer included).
///
/// # Errors
/// `Truncated` when bytes are missing, `Malformed` for broken framing, `TamperedSegment`
/// (part `0xFFFFFFFF`) when the table does not authenticate or the padding is not zero.
pub fn decode(key: &PayloadKey, trailer: &[u8], body_len: u64) -> Result<Layout> {
    let Some(head) = trailer.first_chunk::<TRAILER_HEAD_SIZE>() else {
        return Err(Error::Truncated);
    };
    if crate::be::u32_at(head, 0) != TRAILER_MARKER {
        return Err(Error::Malformed("trailer framing"));
    }
    let table_len = crate::be::u32_at(head, 4) as usize;
    if table_len < 4 + ENTRY_SIZE || table_len > 4 + ENTRY_SIZE * MAX_PART_NUMBER as usize {
        return Err(Error::Malformed("trailer table length"));
    }
    let sealed_end = TRAILER_HEAD_SIZE + table_len + TAG_SIZE;
    if trailer.len() < sealed_end + LEN_FIELD {
        return Err(Error::Truncated);
    }
    let declared = crate::be::u64_at(trailer, trailer.len() - LEN_FIELD);
    if declared != trailer.len() as u64 {
        return Err(if declared > trailer.len() as u64 {
            Error::Truncated
        } else {
            Error::Malformed("trailer length")
        });
    }
    let padding = &trailer[sealed_end..trailer.len() - LEN_FIELD];
    if padding.iter().any(|&b| b != 0) || padding.len() >= FULL_SEGMENT_SIZE {
        return Err(tampered());
    }
    let nonce: [u8; NONCE_SIZE] = crate::be::array_at(head, 8);
    let mut sealed = trailer[TRAILER_HEAD_SIZE..sealed_end].to_vec();
    let table = key
        .trailer_key()
        .open(nonce, head, &mut sealed)
        .map_err(|_| tampered())?;
    let count = crate::be::u32_at(table, 0) as usize;
    if count.checked_mul(ENTRY_SIZE).and_then(|n| n.checked_add(4)) != Some(table.len()) {
        return Err(tampered());
    }
    let parts = table[4..]
        .chunks_exact(ENTRY_SIZE)
        .map(|e| PartInfo {
            number: crate::be::u32_at(e, 0),
            len: crate::be::u64_at(e, 4),
        })
        .collect::<Vec<_>>();
    let layout = Layout::table(&parts)?;
    let expected = layout
        .body_len_without_trailer()
        .saturating_add(trailer.len() as u64);
    match expected.cmp(&body_len) {
        // The padding is unauthenticated: it must be the one minimal length (SPEC 5.3).
        std::cmp::Ordering::Equal
            if body_len.saturating_sub(HEADER_SIZE as u64) % FULL_SEGMENT_SIZE as u64
                != TRAILER_RESIDUE =>
        {
            Err(tampered())
        }
        std::cmp::Ordering::Equal => Ok(layout),
        std::cmp::Ordering::Greater => Err(Error::Truncated),
        std::cmp::Ordering::Less => Err(Error::Malformed("body longer than its trailer's layout")),
    }
}

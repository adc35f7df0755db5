//! The trailer of irregular layouts (SPEC 5.3): writing it and reading it back.

use crate::format::{
    FULL_SEGMENT_SIZE, HEADER_SIZE, SEGMENT_PREFIX_SIZE, TAG_SIZE, TRAILER_MARKER, TRAILER_NONCE,
};
use crate::header::PayloadKey;
use crate::layout::{Layout, PartInfo, trailer_padding};
use crate::{Error, Result};

const ENTRY_SIZE: usize = 12;
const LEN_FIELD: usize = 8;
/// The longest trailer a reader accepts: a full table plus the most padding.
pub const MAX_TRAILER_LEN: usize = SEGMENT_PREFIX_SIZE
    + 4
    + ENTRY_SIZE * crate::format::MAX_PART_NUMBER as usize
    + TAG_SIZE
    + crate::format::FULL_SEGMENT_SIZE
    + LEN_FIELD;

fn tampered() -> Error {
    Error::TamperedSegment {
        part: TRAILER_MARKER,
        index: 0,
    }
}

/// The trailer for a body whose parts (header included) are `body_len` bytes long.
///
/// # Errors
/// [`Error::Malformed`] for a table that [`Layout::table`] would reject.
pub fn encode(key: &PayloadKey, parts: &[PartInfo], body_len: u64) -> Result<Vec<u8>> {
    Layout::table(parts.to_vec())?;
    if body_len < HEADER_SIZE as u64 {
        return Err(Error::Malformed("a body is at least a header long"));
    }
    let too_long = |_| Error::Malformed("layout table too long");
    let mut table = Vec::with_capacity(4 + ENTRY_SIZE * parts.len());
    table.extend_from_slice(&u32::try_from(parts.len()).map_err(too_long)?.to_be_bytes());
    for p in parts {
        table.extend_from_slice(&p.number.to_be_bytes());
        table.extend_from_slice(&p.len.to_be_bytes());
    }
    let mut out = Vec::with_capacity(MAX_TRAILER_LEN.min(table.len() + 2 * FULL_SEGMENT_SIZE));
    out.extend_from_slice(&TRAILER_MARKER.to_be_bytes());
    out.extend_from_slice(&u32::try_from(table.len()).map_err(too_long)?.to_be_bytes());
    let aad: [u8; SEGMENT_PREFIX_SIZE] = crate::be::array_at(&out, 0);
    let start = out.len();
    out.extend_from_slice(&table);
    key.aead.seal_append(TRAILER_NONCE, &aad, &mut out, start);
    let padding = trailer_padding(body_len + (out.len() + LEN_FIELD) as u64);
    out.resize(out.len() + usize::try_from(padding).map_err(too_long)?, 0);
    let total = (out.len() + LEN_FIELD) as u64;
    out.extend_from_slice(&total.to_be_bytes());
    Ok(out)
}

/// Reads `trailer_len` from the last 8 bytes of a body.
///
/// # Errors
/// [`Error::Malformed`] when the length is impossible for a body of `body_len` bytes.
pub fn trailer_len(last8: &[u8; 8], body_len: u64) -> Result<u64> {
    let len = u64::from_be_bytes(*last8);
    let min = (SEGMENT_PREFIX_SIZE + 4 + TAG_SIZE + LEN_FIELD) as u64;
    if len < min
        || len > MAX_TRAILER_LEN as u64
        || len > body_len.saturating_sub(HEADER_SIZE as u64)
    {
        return Err(Error::Malformed("impossible trailer length"));
    }
    Ok(len)
}

/// Opens a whole trailer and returns the layout it records. The caller checks it against
/// the body's length with [`check_fits`].
///
/// # Errors
/// `Malformed` for a trailer that breaks the structure, `TamperedSegment` (part
/// `0xFFFFFFFF`) when it fails authentication.
pub fn decode(key: &PayloadKey, trailer: &[u8]) -> Result<Layout> {
    if trailer.len() < SEGMENT_PREFIX_SIZE + LEN_FIELD {
        return Err(Error::Truncated);
    }
    let marker = crate::be::u32_at(trailer, 0);
    let table_len = crate::be::u32_at(trailer, 4) as usize;
    let declared = crate::be::u64_at(trailer, trailer.len() - LEN_FIELD);
    if marker != TRAILER_MARKER || declared != trailer.len() as u64 {
        return Err(Error::Malformed("trailer framing"));
    }
    let sealed_end = SEGMENT_PREFIX_SIZE + table_len + TAG_SIZE;
    if table_len < 4
        || !(table_len - 4).is_multiple_of(ENTRY_SIZE)
        || sealed_end + LEN_FIELD > trailer.len()
    {
        return Err(Error::Malformed("trailer table length"));
    }
    if trailer[sealed_end..trailer.len() - LEN_FIELD]
        .iter()
        .any(|&b| b != 0)
    {
        return Err(tampered());
    }
    let aad: [u8; SEGMENT_PREFIX_SIZE] = crate::be::array_at(trailer, 0);
    let mut sealed = trailer[SEGMENT_PREFIX_SIZE..sealed_end].to_vec();
    let table = key
        .aead
        .open(TRAILER_NONCE, &aad, &mut sealed)
        .map_err(|_| tampered())?;
    let count = crate::be::u32_at(table, 0) as usize;
    if count * ENTRY_SIZE + 4 != table.len() {
        return Err(tampered());
    }
    let parts = table[4..]
        .chunks_exact(ENTRY_SIZE)
        .map(|e| PartInfo {
            number: crate::be::u32_at(e, 0),
            len: crate::be::u64_at(e, 4),
        })
        .collect();
    Layout::table(parts)
}

/// Checks that a body of `body_len` bytes is exactly header, the table's parts, and a
/// trailer of `trailer_len` bytes.
///
/// # Errors
/// `Truncated` or `Malformed` when it is not.
pub fn check_fits(layout: &Layout, trailer_len: u64, body_len: u64) -> Result<()> {
    let expected = HEADER_SIZE as u64 + layout.parts_ciphertext_len() + trailer_len;
    match expected.cmp(&body_len) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(Error::Truncated),
        std::cmp::Ordering::Less => Err(Error::Malformed("body longer than its trailer's layout")),
    }
}

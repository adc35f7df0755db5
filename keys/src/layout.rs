//! Sizes and layouts (SPEC 6): plaintext size from ciphertext size, where each segment of a
//! body lies, and which ciphertext bytes a plaintext range needs.

use crate::format::{
    FULL_SEGMENT_SIZE, HEADER_SIZE, MAX_PART_NUMBER, SEGMENT_OVERHEAD, SEGMENT_SIZE,
    TRAILER_RESIDUE,
};
use crate::segment::SegmentId;
use crate::{Error, Result};

const SEG: u64 = SEGMENT_SIZE as u64;
const FULL: u64 = FULL_SEGMENT_SIZE as u64;
const OVERHEAD: u64 = SEGMENT_OVERHEAD as u64;
const HEADER: u64 = HEADER_SIZE as u64;

/// What a ciphertext size alone says about a body (SPEC 6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeInfo {
    /// An aligned body of this many plaintext bytes.
    Aligned(u64),
    /// The body ends in a trailer; its table gives the size.
    Trailer,
}

/// Plaintext size of an aligned body from its ciphertext size (the inverse of SPEC 6.1).
///
/// # Errors
/// [`Error::Malformed`] for a size no body can have.
pub fn plaintext_size(ciphertext_len: u64) -> Result<SizeInfo> {
    if ciphertext_len < HEADER + OVERHEAD {
        return Err(Error::Malformed(
            "body shorter than a header and one segment",
        ));
    }
    let x = ciphertext_len - HEADER;
    let (q, r) = (x / FULL, x % FULL);
    Ok(match r {
        0 => SizeInfo::Aligned(q * SEG),
        r if r >= OVERHEAD => SizeInfo::Aligned(q * SEG + r - OVERHEAD),
        _ => SizeInfo::Trailer,
    })
}

/// Ciphertext length of one part of `len` plaintext bytes, without the header.
#[must_use]
pub fn part_ciphertext_len(len: u64) -> u64 {
    let (q, r) = (len / SEG, len % SEG);
    if len == 0 {
        OVERHEAD
    } else {
        q * FULL + if r == 0 { 0 } else { r + OVERHEAD }
    }
}

/// Ciphertext length of a single-part (or aligned) body of `len` plaintext bytes.
#[must_use]
pub fn ciphertext_size(len: u64) -> u64 {
    HEADER + part_ciphertext_len(len)
}

fn segments_in(len: u64) -> u64 {
    len.div_ceil(SEG).max(1)
}

/// One part of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartInfo {
    /// Part number.
    pub number: u32,
    /// Plaintext length.
    pub len: u64,
}

/// Where each segment of a body lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// SPEC 6.2: parts 1..k of `part_size` bytes (0: a single part), `size` bytes in all.
    Regular {
        /// Plaintext size of the object.
        size: u64,
        /// `P`, a multiple of `SEGMENT_SIZE`, or 0 for one part.
        part_size: u64,
    },
    /// SPEC 6.3: the parts a trailer lists.
    Table(Vec<PartInfo>),
}

/// A segment located in a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentPos {
    /// Which segment, for its nonce.
    pub id: SegmentId,
    /// Offset of its first plaintext byte in the object.
    pub plaintext_offset: u64,
    /// Its plaintext length.
    pub plaintext_len: u64,
    /// Offset of its prefix in the body.
    pub ciphertext_offset: u64,
}

impl SegmentPos {
    /// Its length in the body.
    #[must_use]
    pub fn ciphertext_len(&self) -> u64 {
        self.plaintext_len + OVERHEAD
    }
}

impl Layout {
    /// The regular layout of a body of plaintext `size` whose header says `part_size`.
    ///
    /// # Errors
    /// [`Error::Malformed`] when `part_size` cannot describe a regular body of that size
    /// (not a multiple of `SEGMENT_SIZE`, or more than `MAX_PART_NUMBER` parts).
    pub fn regular(size: u64, part_size: u64) -> Result<Self> {
        // A part size at least as large as the object means a single part, whatever P says.
        let part_size = if part_size >= size { 0 } else { part_size };
        if part_size != 0
            && (part_size % SEG != 0 || size.div_ceil(part_size) > u64::from(MAX_PART_NUMBER))
        {
            return Err(Error::Malformed(
                "part size hint does not describe a regular layout",
            ));
        }
        Ok(Layout::Regular { size, part_size })
    }

    /// The layout a trailer's table describes.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the table is empty, unordered or out of range.
    pub fn table(parts: Vec<PartInfo>) -> Result<Self> {
        if parts.is_empty() {
            return Err(Error::Malformed("empty layout table"));
        }
        let mut prev = 0;
        for (i, p) in parts.iter().enumerate() {
            if p.number <= prev || p.number > MAX_PART_NUMBER {
                return Err(Error::Malformed(
                    "layout table part numbers not ascending in 1..=10000",
                ));
            }
            if p.len == 0 && i + 1 != parts.len() {
                return Err(Error::Malformed("an empty part that is not the last"));
            }
            prev = p.number;
        }
        Ok(Layout::Table(parts))
    }

    /// Plaintext size of the object.
    #[must_use]
    pub fn size(&self) -> u64 {
        match self {
            Layout::Regular { size, .. } => *size,
            Layout::Table(parts) => parts.iter().map(|p| p.len).sum(),
        }
    }

    /// Ciphertext length of the parts (the body without header and trailer).
    #[must_use]
    pub fn parts_ciphertext_len(&self) -> u64 {
        match self {
            Layout::Regular { size, .. } => part_ciphertext_len(*size),
            Layout::Table(parts) => parts.iter().map(|p| part_ciphertext_len(p.len)).sum(),
        }
    }

    /// The segment that holds plaintext offset `offset` (`offset < size`, or 0 for an
    /// empty object).
    #[must_use]
    pub fn locate(&self, offset: u64) -> Option<SegmentPos> {
        match self {
            Layout::Regular { size, part_size } => {
                if offset >= (*size).max(1) {
                    return None;
                }
                let g = offset / SEG;
                Some(Self::regular_segment(*size, *part_size, g))
            }
            Layout::Table(parts) => {
                let (mut pt, mut ct) = (0u64, HEADER);
                for p in parts {
                    if offset < pt + p.len || (p.len == 0 && offset == pt && self.size() == 0) {
                        let index = (offset - pt) / SEG;
                        return Some(table_segment(p, pt, ct, index));
                    }
                    pt += p.len;
                    ct += part_ciphertext_len(p.len);
                }
                None
            }
        }
    }

    /// The segment after `pos`, if any holds plaintext.
    #[must_use]
    pub fn next(&self, pos: &SegmentPos) -> Option<SegmentPos> {
        let next = pos.plaintext_offset + pos.plaintext_len;
        if next >= self.size() {
            None
        } else {
            self.locate(next)
        }
    }

    fn regular_segment(size: u64, part_size: u64, g: u64) -> SegmentPos {
        let last_g = segments_in(size) - 1;
        let (part, index, last) = if part_size == 0 {
            (1, g, g == last_g)
        } else {
            let per = part_size / SEG;
            (g / per + 1, g % per, g % per == per - 1 || g == last_g)
        };
        let plaintext_offset = g * SEG;
        SegmentPos {
            id: SegmentId {
                part: u32::try_from(part).expect("checked against MAX_PART_NUMBER"),
                index,
                last,
            },
            plaintext_offset,
            plaintext_len: (size - plaintext_offset).min(SEG),
            ciphertext_offset: HEADER + g * FULL,
        }
    }

    /// The ciphertext bytes (inclusive) that plaintext bytes `start..=end` need, and the
    /// first segment of them. `end` is clamped to the object; S3's "over-long ranges are
    /// truncated" is the caller's to apply before.
    ///
    /// # Errors
    /// [`Error::RangeNotSatisfiable`] when `start > end` or `end` is past the object.
    pub fn ciphertext_range(&self, start: u64, end: u64) -> Result<(SegmentPos, u64, u64)> {
        let size = self.size();
        if start > end || end >= size {
            return Err(Error::RangeNotSatisfiable { start, end, size });
        }
        let not_found = Error::RangeNotSatisfiable { start, end, size };
        let (Some(first), Some(last)) = (self.locate(start), self.locate(end)) else {
            return Err(not_found);
        };
        Ok((
            first,
            first.ciphertext_offset,
            last.ciphertext_offset + last.ciphertext_len() - 1,
        ))
    }
}

fn table_segment(p: &PartInfo, part_start: u64, part_ct: u64, index: u64) -> SegmentPos {
    let count = segments_in(p.len);
    let plaintext_offset = part_start + index * SEG;
    SegmentPos {
        id: SegmentId {
            part: p.number,
            index,
            last: index == count - 1,
        },
        plaintext_offset,
        plaintext_len: (part_start + p.len - plaintext_offset).min(SEG),
        ciphertext_offset: part_ct + index * FULL,
    }
}

/// The residue a trailer's padding aims for, as a `u64` for size arithmetic.
pub(crate) fn trailer_padding(body_len_before_padding: u64) -> u64 {
    let x = body_len_before_padding - HEADER;
    (TRAILER_RESIDUE + FULL - x % FULL) % FULL
}

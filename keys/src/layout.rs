//! Sizes and layouts (SPEC 6): plaintext size from ciphertext size, where each segment of a
//! body lies, and which ciphertext bytes a plaintext range needs.

use crate::format::{
    FULL_SEGMENT_SIZE, HEADER_SIZE, MAX_PART_NUMBER, MAX_PART_SIZE, SEGMENT_OVERHEAD, SEGMENT_SIZE,
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

/// Ciphertext length of one part of `len` plaintext bytes, without the header; `None` if
/// it does not fit a `u64`.
#[must_use]
pub fn part_ciphertext_len(len: u64) -> Option<u64> {
    let (q, r) = (len / SEG, len % SEG);
    if len == 0 {
        return Some(OVERHEAD);
    }
    q.checked_mul(FULL)?
        .checked_add(if r == 0 { 0 } else { r + OVERHEAD })
}

/// Ciphertext length of a single-part (or aligned) body of `len` plaintext bytes; `None`
/// if it does not fit a `u64`.
#[must_use]
pub fn ciphertext_size(len: u64) -> Option<u64> {
    part_ciphertext_len(len)?.checked_add(HEADER)
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

#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr {
    /// SPEC 6.2: parts 1..k of `part_size` bytes (0: a single part).
    Regular { size: u64, part_size: u64 },
    /// SPEC 6.3: the parts of a trailer's table, each with its plaintext and ciphertext
    /// start, so that a lookup is a binary search.
    Table {
        parts: Vec<(PartInfo, u64, u64)>,
        size: u64,
        ciphertext_end: u64,
    },
}

/// Where each segment of a body lies. Built only by [`Layout::regular`] and
/// [`Layout::table`], which check it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout(Repr);

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
            && (!part_size.is_multiple_of(SEG)
                || size.div_ceil(part_size) > u64::from(MAX_PART_NUMBER))
        {
            return Err(Error::Malformed(
                "part size hint does not describe a regular layout",
            ));
        }
        if ciphertext_size(size).is_none() {
            return Err(Error::Malformed("object too large"));
        }
        Ok(Self(Repr::Regular { size, part_size }))
    }

    /// The layout a trailer's table describes.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the table breaks SPEC 5.3: empty, not starting at part 1,
    /// not ascending, a part over 5 GiB, or an empty part that is not the last.
    pub fn table(parts: &[PartInfo]) -> Result<Self> {
        if parts.first().is_none_or(|p| p.number != 1) {
            return Err(Error::Malformed("layout table does not start with part 1"));
        }
        let mut located = Vec::with_capacity(parts.len());
        let (mut prev, mut pt, mut ct) = (0, 0u64, HEADER);
        for (i, p) in parts.iter().enumerate() {
            if p.number <= prev || p.number > MAX_PART_NUMBER {
                return Err(Error::Malformed(
                    "layout table part numbers not ascending in 1..=10000",
                ));
            }
            if p.len > MAX_PART_SIZE || (p.len == 0 && i + 1 != parts.len()) {
                return Err(Error::Malformed("layout table part length out of range"));
            }
            located.push((*p, pt, ct));
            prev = p.number;
            // At most 10000 parts of at most 5 GiB: these sums cannot overflow.
            pt += p.len;
            ct += part_ciphertext_len(p.len).unwrap_or(u64::MAX / 2);
        }
        Ok(Self(Repr::Table {
            parts: located,
            size: pt,
            ciphertext_end: ct,
        }))
    }

    /// Plaintext size of the object.
    #[must_use]
    pub fn size(&self) -> u64 {
        match &self.0 {
            Repr::Regular { size, .. } | Repr::Table { size, .. } => *size,
        }
    }

    /// The parts, for a layout from a table.
    #[must_use]
    pub fn table_parts(&self) -> Option<Vec<PartInfo>> {
        match &self.0 {
            Repr::Regular { .. } => None,
            Repr::Table { parts, .. } => Some(parts.iter().map(|(p, ..)| *p).collect()),
        }
    }

    /// Length of header and parts (the body without its trailer).
    #[must_use]
    pub fn body_len_without_trailer(&self) -> u64 {
        match &self.0 {
            // `regular` checked that this fits.
            Repr::Regular { size, .. } => ciphertext_size(*size).unwrap_or(u64::MAX),
            Repr::Table { ciphertext_end, .. } => *ciphertext_end,
        }
    }

    /// Offsets in the body where parts after the first begin, with their part numbers: a
    /// reader can check the layout by looking at the segment prefixes there.
    #[must_use]
    pub fn part_starts(&self) -> Vec<(u32, u64)> {
        match &self.0 {
            Repr::Regular { size, part_size } if *part_size > 0 => {
                let per = part_size / SEG;
                (1..size.div_ceil(*part_size))
                    .map(|i| {
                        (
                            u32::try_from(i + 1).unwrap_or(u32::MAX),
                            HEADER + i * per * FULL,
                        )
                    })
                    .collect()
            }
            Repr::Regular { .. } => Vec::new(),
            Repr::Table { parts, .. } => parts
                .iter()
                .skip(1)
                .map(|(p, _, ct)| (p.number, *ct))
                .collect(),
        }
    }

    /// How many parts the object has (a `partNumber` read names one of them).
    #[must_use]
    pub fn part_count(&self) -> u32 {
        match &self.0 {
            Repr::Regular { size, part_size } if *part_size > 0 => {
                u32::try_from(size.div_ceil(*part_size)).unwrap_or(u32::MAX)
            }
            Repr::Regular { .. } => 1,
            Repr::Table { parts, .. } => u32::try_from(parts.len()).unwrap_or(u32::MAX),
        }
    }

    /// The plaintext bytes of the `n`-th part (1-based, in body order) as (start, length).
    #[must_use]
    pub fn part_span(&self, n: u32) -> Option<(u64, u64)> {
        let i = u64::from(n.checked_sub(1)?);
        match &self.0 {
            Repr::Regular { size, part_size } if *part_size > 0 => {
                let start = i
                    .checked_mul(*part_size)
                    .filter(|s| s < size || (*s == 0 && *size == 0))?;
                Some((start, (*size - start).min(*part_size)))
            }
            Repr::Regular { size, .. } => (i == 0).then_some((0, *size)),
            Repr::Table { parts, .. } => {
                let (p, start, _) = parts.get(usize::try_from(i).ok()?)?;
                Some((*start, p.len))
            }
        }
    }

    /// The segment that holds plaintext offset `offset`, if `offset < size`.
    #[must_use]
    pub fn locate(&self, offset: u64) -> Option<SegmentPos> {
        if offset >= self.size() {
            return None;
        }
        match &self.0 {
            Repr::Regular { size, part_size } => {
                Some(regular_segment(*size, *part_size, offset / SEG))
            }
            Repr::Table { parts, .. } => {
                // The last part whose plaintext starts at or before `offset` and holds it.
                let i = parts.partition_point(|(p, pt, _)| pt + p.len <= offset);
                let (p, pt, ct) = parts.get(i)?;
                Some(table_segment(p, *pt, *ct, (offset - pt) / SEG))
            }
        }
    }

    /// The segment after `pos`, if any holds plaintext.
    #[must_use]
    pub fn next(&self, pos: &SegmentPos) -> Option<SegmentPos> {
        self.locate(pos.plaintext_offset + pos.plaintext_len)
    }

    /// The ciphertext bytes (inclusive) that plaintext bytes `start..=end` need, and the
    /// first segment of them. S3's truncation of over-long ranges is the caller's to apply.
    ///
    /// # Errors
    /// [`Error::RangeNotSatisfiable`] when `start > end` or `end` is past the object.
    pub fn ciphertext_range(&self, start: u64, end: u64) -> Result<(SegmentPos, u64, u64)> {
        let size = self.size();
        let not_found = Error::RangeNotSatisfiable { start, end, size };
        if start > end {
            return Err(not_found);
        }
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
        // `regular` bounds the part count by MAX_PART_NUMBER.
        id: SegmentId {
            part: u32::try_from(part).unwrap_or(u32::MAX),
            index,
            last,
        },
        plaintext_offset,
        plaintext_len: (size - plaintext_offset).min(SEG),
        ciphertext_offset: HEADER + g * FULL,
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

/// The padding that brings a body of `body_len_before_padding` bytes to the trailer
/// residue (SPEC 5.3). The caller ensures `body_len_before_padding >= HEADER_SIZE`.
pub(crate) fn trailer_padding(body_len_before_padding: u64) -> u64 {
    let x = body_len_before_padding.saturating_sub(HEADER);
    (TRAILER_RESIDUE + FULL - x % FULL) % FULL
}

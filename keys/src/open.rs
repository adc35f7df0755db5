//! Reading a whole body front to back (SPEC 5.2 and 5.3), for any layout, with memory
//! bounded by one segment (or one trailer).

use std::sync::Arc;

use crate::Output;
use crate::cipher::AeadKey;
use crate::format::{HEADER_SIZE, SEGMENT_PREFIX_SIZE, TAG_SIZE};
use crate::header::{Header, ObjectName, PayloadKey};
use crate::keyring::Keyring;
use crate::layout::PartInfo;
use crate::segment::{PartNonce, Prefix, SegmentId, parse_prefix};
use crate::trailer::{self, MAX_TRAILER_LEN};
use crate::transform::Transform;
use crate::{Error, Result};

enum Stage {
    /// Collecting the header; the keyring and name verify it once complete.
    Header {
        keyring: Arc<Keyring>,
        bucket: String,
        key: String,
    },
    /// Walking segments with the verified keys.
    Segments { key: PayloadKey },
    /// A trailer started: everything up to the end belongs to it.
    Trailer { key: PayloadKey },
    /// An error was returned; nothing more is accepted.
    Failed,
}

/// The part being read.
struct Current {
    part: u32,
    nonce: PartNonce,
    key: AeadKey,
    index: u64,
    len: u64,
}

/// Decrypts a whole body, checking every rule of SPEC 5.2: a part truncated, a segment
/// altered, moved, dropped or duplicated, or a body that stops early all fail.
///
/// Plaintext is emitted segment by segment as each authenticates; a failure reported by
/// [`Transform::finish`] (the body ended early, a part is missing) means the output so far
/// is not the whole object, so a consumer must treat it as failed (SPEC 5.2).
pub struct BodyOpener {
    stage: Stage,
    buf: Vec<u8>,
    /// Completed parts so far.
    parts: Vec<PartInfo>,
    current: Option<Current>,
    /// The unit being collected in `buf`, once its prefix is known, and its length.
    need: Option<(Prefix, usize)>,
    gaps: bool,
    /// Whether the body has a trailer, when the caller knows (from its size).
    trailer_expected: Option<bool>,
    /// The parts the body must hold, when the caller has read its trailer already.
    parts_expected: Option<Vec<PartInfo>>,
    /// `P` of the verified header (SPEC 6.2): without a trailer, every part but the last
    /// holds exactly `P` bytes and the last at most `P`. `None` leaves lengths unchecked.
    part_size: Option<u64>,
    /// Set by [`BodyOpener::unchecked_part_lengths`]: the header's `P` is not taken.
    lengths_unchecked: bool,
    consumed: u64,
}

impl BodyOpener {
    /// An opener for the body of `bucket`/`key`, starting at the header.
    #[must_use]
    pub fn new(keyring: Arc<Keyring>, bucket: String, key: String) -> Self {
        Self::with_stage(
            Stage::Header {
                keyring,
                bucket,
                key,
            },
            0,
        )
    }

    /// An opener for the bytes after a header that the caller has verified.
    #[must_use]
    pub fn after_header(key: PayloadKey) -> Self {
        Self::with_stage(Stage::Segments { key }, HEADER_SIZE as u64)
    }

    /// Tells the opener whether the body ends in a trailer, as its size shows (SPEC 6.1),
    /// so that a gap in the part numbers of a body without one fails at once, before any
    /// later plaintext is emitted.
    #[must_use]
    pub fn expect_trailer(mut self, trailer: bool) -> Self {
        self.trailer_expected = Some(trailer);
        self
    }

    /// Tells the opener the parts the body holds, from its trailer read beforehand (a range
    /// read's [`crate::Layout`]), so that a part that is not the next one listed, or longer
    /// or shorter than listed, fails before its plaintext is emitted instead of when the
    /// trailer at the end is compared (SPEC 5.2 allows either). Implies a trailer.
    #[must_use]
    pub fn expect_parts(mut self, parts: Vec<PartInfo>) -> Self {
        self.trailer_expected = Some(true);
        self.parts_expected = Some(parts);
        self
    }

    /// Tells an opener made by [`BodyOpener::after_header`] the verified header's `P`, so
    /// that a body without a trailer whose parts are not `P` bytes long (but the last, at
    /// most `P`) fails: an earlier upload of a part with another length put back, or a part
    /// left out of the completion appended (SPEC 5.2).
    #[must_use]
    pub fn expect_part_size(mut self, part_size: u64) -> Self {
        self.part_size = Some(part_size);
        self.lengths_unchecked = false;
        self
    }

    /// Leaves the part lengths of a body without a trailer unchecked: only for recovering
    /// an irregular object whose layout trailer was never written (a completion whose
    /// rewrite failed, SPEC 6.3). A writer of the bucket can then put back an earlier
    /// upload of a part with another length, or append a part, undetected.
    #[must_use]
    pub fn unchecked_part_lengths(mut self) -> Self {
        self.part_size = None;
        self.lengths_unchecked = true;
        self
    }

    fn with_stage(stage: Stage, consumed: u64) -> Self {
        Self {
            stage,
            buf: Vec::new(),
            parts: Vec::new(),
            current: None,
            need: None,
            gaps: false,
            trailer_expected: None,
            parts_expected: None,
            part_size: None,
            lengths_unchecked: false,
            consumed,
        }
    }

    /// Whether a body without a trailer may hold a part of `len` bytes (so far, or in
    /// all and with another part after it when `complete_and_not_last`).
    fn fits_part_size(&self, len: u64, complete_and_not_last: bool) -> bool {
        fits(self.part_size, len, complete_and_not_last)
    }

    /// The parts read, once [`Transform::finish`] succeeded.
    #[must_use]
    pub fn parts(&self) -> &[PartInfo] {
        &self.parts
    }

    fn fail<T>(&mut self, e: Error) -> Result<T> {
        self.stage = Stage::Failed;
        self.buf = Vec::new();
        Err(e)
    }

    fn take_header(&mut self, input: &mut &[u8]) -> Result<()> {
        let take = (HEADER_SIZE - self.buf.len()).min(input.len());
        self.buf.extend_from_slice(&input[..take]);
        *input = &input[take..];
        self.consumed += take as u64;
        // Parse what is there already, so that a body that is not a kura object (or of
        // an unknown version) fails at once rather than after 164 bytes.
        let parsed = Header::parse(&self.buf);
        if self.buf.len() < HEADER_SIZE {
            return match parsed {
                Err(Error::Truncated) | Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
        }
        let Stage::Header {
            keyring,
            bucket,
            key,
        } = &self.stage
        else {
            return Err(Error::Malformed("header read outside the header stage"));
        };
        let verified = parsed
            .and_then(|h| ObjectName::new(bucket, key).and_then(|name| h.verify(keyring, &name)))?;
        if !self.lengths_unchecked {
            self.part_size = Some(verified.header().part_size());
        }
        self.stage = Stage::Segments {
            key: verified.into_payload_key(),
        };
        self.buf.clear();
        Ok(())
    }

    /// The segment the walk expects next, for naming it in errors.
    fn expected(&self) -> SegmentId {
        match &self.current {
            Some(c) => SegmentId {
                part: c.part,
                index: c.index,
                last: false,
            },
            None => SegmentId {
                part: self.parts.last().map_or(1, |p| p.number + 1),
                index: 0,
                last: false,
            },
        }
    }

    /// Checks a prefix against where the walk is, and returns the whole unit's length
    /// (0 for a trailer, which runs to the end of the body).
    fn admit(&mut self, prefix: Option<Prefix>) -> Result<usize> {
        let expected = self.expected();
        let Some(prefix) = prefix else {
            return Err(expected.tampered());
        };
        let (part, len, nonce) = match prefix {
            Prefix::Trailer if self.current.is_none() && self.trailer_expected != Some(false) => {
                return Ok(0);
            }
            Prefix::Trailer => return Err(expected.tampered()),
            Prefix::Segment {
                part, len, nonce, ..
            } => (part, len, nonce),
        };
        match &self.current {
            Some(c) if c.part != part || c.nonce != nonce => return Err(expected.tampered()),
            Some(_) => {}
            None => {
                let prev = self.parts.last().map_or(0, |p| p.number);
                let gap = part != prev + 1;
                if part <= prev || (gap && self.trailer_expected == Some(false)) {
                    return Err(expected.tampered());
                }
                if self.parts.last().is_some_and(|p| p.len == 0) {
                    return Err(Error::Malformed("an empty part that is not the last"));
                }
                let no_trailer = self.trailer_expected == Some(false);
                if no_trailer
                    && !self
                        .parts
                        .last()
                        .is_none_or(|p| self.fits_part_size(p.len, true))
                {
                    return Err(expected.tampered());
                }
                if self
                    .parts_expected
                    .as_ref()
                    .is_some_and(|t| t.get(self.parts.len()).map(|p| p.number) != Some(part))
                {
                    return Err(expected.tampered());
                }
                let Stage::Segments { key } = &self.stage else {
                    return Err(Error::Malformed("segment outside the segment stage"));
                };
                self.gaps |= gap;
                self.current = Some(Current {
                    part,
                    nonce,
                    key: key.part_key(part, nonce),
                    index: 0,
                    len: 0,
                });
            }
        }
        Ok(SEGMENT_PREFIX_SIZE + len + TAG_SIZE)
    }

    /// Opens one complete segment and appends its plaintext to `out`.
    fn open_unit(&mut self, prefix: Prefix, unit: &[u8], out: &mut Output) -> Result<()> {
        let limit = (self.trailer_expected == Some(false)).then_some(self.part_size);
        let (Prefix::Segment { last, len, .. }, Some(cur)) = (prefix, self.current.as_mut()) else {
            return Err(Error::Malformed("segment without a part"));
        };
        let id = SegmentId {
            part: cur.part,
            index: cur.index,
            last,
        };
        // Checked before the segment opens: its plaintext must not go out if the part's
        // length disagrees with the table the caller read.
        if let Some(want) = self
            .parts_expected
            .as_ref()
            .and_then(|t| t.get(self.parts.len()))
        {
            let through = cur.len + len as u64;
            if through > want.len || (last && through != want.len) {
                return Err(id.tampered());
            }
        }
        if limit.is_some_and(|p| !fits(p, cur.len + len as u64, false)) {
            return Err(id.tampered());
        }
        let (head, sealed) = unit.split_at(SEGMENT_PREFIX_SIZE);
        // Decrypted straight from the input into `out`: no copy of the ciphertext first.
        if cur.key.open_append(id.nonce(), head, sealed, out).is_err() {
            return Err(id.tampered());
        }
        if last && len == 0 && cur.index != 0 {
            return Err(id.tampered());
        }
        cur.len += len as u64;
        cur.index += 1;
        if last {
            self.parts.push(PartInfo {
                number: cur.part,
                len: cur.len,
            });
            self.current = None;
        }
        Ok(())
    }

    fn step(&mut self, input: &mut &[u8], out: &mut Output) -> Result<()> {
        // A whole unit in the input: open it from there, without copying it into `buf`.
        if self.buf.is_empty()
            && self.need.is_none()
            && let Some(head) = input.first_chunk::<SEGMENT_PREFIX_SIZE>()
        {
            let prefix = parse_prefix(head);
            let len = self.admit(prefix)?;
            let prefix = prefix.expect("admit rejects unparsable prefixes");
            if len == 0 {
                return self.begin_trailer(input);
            }
            if input.len() >= len {
                let (unit, rest) = input.split_at(len);
                self.open_unit(prefix, unit, out)?;
                self.consumed += len as u64;
                *input = rest;
                return Ok(());
            }
            self.need = Some((prefix, len));
        }
        let want = self.need.map_or(SEGMENT_PREFIX_SIZE, |(_, len)| len);
        let take = (want - self.buf.len()).min(input.len());
        self.buf.extend_from_slice(&input[..take]);
        *input = &input[take..];
        if self.buf.len() < want {
            return Ok(());
        }
        let (prefix, len) = if let Some(n) = self.need {
            n
        } else {
            let head: [u8; SEGMENT_PREFIX_SIZE] = crate::be::array_at(&self.buf, 0);
            let prefix = parse_prefix(&head);
            let len = self.admit(prefix)?;
            let prefix = prefix.expect("admit rejects unparsable prefixes");
            if len == 0 {
                return self.begin_trailer(input);
            }
            self.need = Some((prefix, len));
            if self.buf.len() < len {
                return Ok(());
            }
            (prefix, len)
        };
        let unit = std::mem::take(&mut self.buf);
        self.need = None;
        let r = self.open_unit(prefix, &unit, out);
        self.consumed += len as u64;
        self.buf = unit;
        self.buf.clear();
        r
    }

    fn begin_trailer(&mut self, input: &mut &[u8]) -> Result<()> {
        let Stage::Segments { key } = std::mem::replace(&mut self.stage, Stage::Failed) else {
            return Err(Error::Malformed("trailer outside the segment stage"));
        };
        self.stage = Stage::Trailer { key };
        self.take_trailer(input)
    }

    fn take_trailer(&mut self, input: &mut &[u8]) -> Result<()> {
        if self.buf.len() + input.len() > MAX_TRAILER_LEN {
            return Err(Error::Malformed("trailer longer than any valid trailer"));
        }
        self.buf.extend_from_slice(input);
        *input = &[];
        Ok(())
    }

    fn check_end(&self) -> Result<()> {
        if self.current.is_some() || self.parts.is_empty() {
            return Err(Error::Truncated);
        }
        match &self.stage {
            Stage::Segments { .. } if !self.buf.is_empty() || self.need.is_some() => {
                Err(Error::Truncated)
            }
            Stage::Trailer { key } => {
                let body_len = self.consumed + self.buf.len() as u64;
                let table = trailer::decode(key, &self.buf, body_len).and_then(|l| {
                    l.table_parts()
                        .ok_or(Error::Malformed("trailer without a table"))
                });
                let table = match table {
                    // The walk holds fewer parts than the table: the body lost some.
                    Err(Error::Truncated) => return Err(Error::Truncated),
                    other => other?,
                };
                if table.len() > self.parts.len() && table[..self.parts.len()] == self.parts[..] {
                    return Err(Error::Truncated);
                }
                if table != self.parts {
                    return Err(Error::Malformed("parts do not match the trailer's table"));
                }
                Ok(())
            }
            _ if self.trailer_expected == Some(true) => Err(Error::Truncated),
            _ if self.gaps || self.parts[0].number != 1 => {
                let missing = self
                    .parts
                    .iter()
                    .zip(1..)
                    .find(|(p, n)| p.number != *n)
                    .map_or(1, |(_, n)| n);
                Err(Error::TamperedSegment {
                    part: missing,
                    index: 0,
                })
            }
            _ => self.check_part_lengths(),
        }
    }

    /// SPEC 5.2 for a body that ended without a trailer: every part but the last holds
    /// `P` bytes, the last at most `P`.
    fn check_part_lengths(&self) -> Result<()> {
        let (last, rest) = self.parts.split_last().ok_or(Error::Truncated)?;
        let bad = rest
            .iter()
            .find(|p| !self.fits_part_size(p.len, true))
            .or_else(|| (!self.fits_part_size(last.len, false)).then_some(last));
        match bad {
            Some(p) => Err(Error::TamperedSegment {
                part: p.number,
                index: 0,
            }),
            None => Ok(()),
        }
    }
}

/// [`BodyOpener::fits_part_size`] for a part size hint `part_size` (`None`: unchecked).
fn fits(part_size: Option<u64>, len: u64, complete_and_not_last: bool) -> bool {
    match part_size {
        None => true,
        Some(0) => !complete_and_not_last,
        Some(p) if complete_and_not_last => len == p,
        Some(p) => len <= p,
    }
}

impl Transform for BodyOpener {
    fn update(&mut self, mut input: &[u8], out: &mut Output) -> Result<()> {
        while !input.is_empty() {
            let r = match self.stage {
                Stage::Header { .. } => self.take_header(&mut input),
                Stage::Segments { .. } => self.step(&mut input, out),
                Stage::Trailer { .. } => self.take_trailer(&mut input),
                Stage::Failed => Err(Error::Malformed("input after an error")),
            };
            if let Err(e) = r {
                return self.fail(e);
            }
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Output) -> Result<()> {
        let r = match self.stage {
            Stage::Header { .. } => Err(Header::parse(&self.buf).err().unwrap_or(Error::Truncated)),
            Stage::Failed => Err(Error::Malformed("finish after an error")),
            _ => self.check_end(),
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e),
        }
    }
}

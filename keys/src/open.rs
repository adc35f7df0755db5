//! Reading a whole body front to back (SPEC 5.2 and 5.3), for any layout, with memory
//! bounded by one segment (or one trailer).

use std::sync::Arc;

use crate::format::{HEADER_SIZE, SEGMENT_PREFIX_SIZE, TAG_SIZE};
use crate::header::{Header, ObjectName, PayloadKey};
use crate::keyring::Keyring;
use crate::layout::{Layout, PartInfo};
use crate::segment::{Prefix, SegmentId, parse_prefix};
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
    /// Walking segments with the verified payload key.
    Segments { key: PayloadKey },
    /// A trailer started: everything up to the end belongs to it.
    Trailer { key: PayloadKey },
    /// An error was returned; nothing more is accepted.
    Failed,
}

/// Decrypts a whole body, checking every rule of SPEC 5.2: a part truncated, a segment
/// altered, moved, dropped or duplicated, or a body that stops early all fail.
///
/// Plaintext is emitted segment by segment as each authenticates; a failure reported by
/// [`Transform::finish`] (the body ended early, a part is missing) means the output so far
/// is not the whole object, so a consumer must treat it as failed.
pub struct BodyOpener {
    stage: Stage,
    buf: Vec<u8>,
    /// Completed parts so far.
    parts: Vec<PartInfo>,
    /// The part being read, with its next index and length so far, if inside one.
    current: Option<(u32, u64, u64)>,
    /// Length of the unit being collected in `buf` once its prefix is known.
    need: Option<(Prefix, usize)>,
    gaps: bool,
}

impl BodyOpener {
    /// An opener for the body of `bucket`/`key`, starting at the header.
    #[must_use]
    pub fn new(keyring: Arc<Keyring>, bucket: String, key: String) -> Self {
        Self::with_stage(Stage::Header {
            keyring,
            bucket,
            key,
        })
    }

    /// An opener for the bytes after a header that the caller has verified.
    #[must_use]
    pub fn after_header(key: PayloadKey) -> Self {
        Self::with_stage(Stage::Segments { key })
    }

    fn with_stage(stage: Stage) -> Self {
        Self {
            stage,
            buf: Vec::new(),
            parts: Vec::new(),
            current: None,
            need: None,
            gaps: false,
        }
    }

    /// The layout read, once [`Transform::finish`] succeeded.
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
        // Parse as soon as the first bytes are in, so that a non-kura or unsupported body
        // fails at once instead of after 164 bytes.
        if self.buf.len() < HEADER_SIZE {
            return match Header::parse(&self.buf) {
                Err(Error::Truncated) => Ok(()),
                Err(e) => self.fail(e),
                Ok(_) => unreachable!("a header shorter than HEADER_SIZE never parses"),
            };
        }
        let Stage::Header {
            keyring,
            bucket,
            key,
        } = &self.stage
        else {
            unreachable!("called in the header stage")
        };
        let verified = Header::parse(&self.buf)
            .and_then(|h| ObjectName::new(bucket, key).and_then(|name| h.verify(keyring, &name)));
        match verified {
            Ok(v) => {
                self.stage = Stage::Segments {
                    key: v.into_payload_key(),
                };
                self.buf.clear();
                Ok(())
            }
            Err(e) => self.fail(e),
        }
    }

    /// Checks a prefix against where the walk is, and returns the whole unit's length.
    fn admit(&mut self, prefix: Prefix) -> Result<usize> {
        match prefix {
            Prefix::Trailer { .. } => {
                if let Some((part, index, _)) = self.current {
                    return Err(Error::TamperedSegment { part, index });
                }
                Ok(0)
            }
            Prefix::Segment { part, len, .. } => {
                match self.current {
                    Some((cur, index, _)) if cur != part => {
                        return Err(Error::TamperedSegment { part: cur, index });
                    }
                    Some(_) => {}
                    None => {
                        let prev = self.parts.last().map_or(0, |p| p.number);
                        if part <= prev {
                            return Err(Error::TamperedSegment {
                                part: prev + 1,
                                index: 0,
                            });
                        }
                        if self.parts.last().is_some_and(|p| p.len == 0) {
                            return Err(Error::Malformed("an empty part that is not the last"));
                        }
                        self.gaps |= part != prev + 1;
                        self.current = Some((part, 0, 0));
                    }
                }
                Ok(SEGMENT_PREFIX_SIZE + len + TAG_SIZE)
            }
        }
    }

    /// Opens one complete segment held in `unit` and appends its plaintext to `out`.
    fn open_unit(&mut self, prefix: Prefix, unit: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let Prefix::Segment { part, last, len } = prefix else {
            unreachable!("segments only")
        };
        let Stage::Segments { key } = &self.stage else {
            unreachable!("segment stage")
        };
        let (_, index, so_far) = self.current.expect("admit set the current part");
        let id = SegmentId { part, index, last };
        let start = out.len();
        out.extend_from_slice(&unit[SEGMENT_PREFIX_SIZE..]);
        let opened = key
            .aead
            .open(id.nonce(), &unit[..SEGMENT_PREFIX_SIZE], &mut out[start..])
            .map(|p| p.len());
        if let Ok(n) = opened {
            out.truncate(start + n);
        } else {
            out.truncate(start);
            return Err(id.tampered());
        }
        if last && len == 0 && index != 0 {
            return Err(Error::Malformed("empty final segment after other segments"));
        }
        let so_far = so_far + len as u64;
        if last {
            self.parts.push(PartInfo {
                number: part,
                len: so_far,
            });
            self.current = None;
        } else {
            self.current = Some((part, index + 1, so_far));
        }
        Ok(())
    }

    fn step(&mut self, input: &mut &[u8], out: &mut Vec<u8>) -> Result<()> {
        // A whole unit in the input: open it from there, without copying it into `buf`.
        if self.buf.is_empty() && self.need.is_none() && input.len() >= SEGMENT_PREFIX_SIZE {
            let prefix = parse_prefix(crate::be::array_at(input, 0))?;
            let len = self.admit(prefix)?;
            if len == 0 {
                return self.begin_trailer(input);
            }
            if input.len() >= len {
                let (unit, rest) = input.split_at(len);
                self.open_unit(prefix, unit, out)?;
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
            let prefix = parse_prefix(crate::be::array_at(&self.buf, 0))?;
            let len = self.admit(prefix)?;
            if len == 0 {
                return self.begin_trailer(input);
            }
            self.need = Some((prefix, len));
            if self.buf.len() < len {
                return Ok(());
            }
            (prefix, len)
        };
        debug_assert_eq!(self.buf.len(), len);
        let unit = std::mem::take(&mut self.buf);
        self.need = None;
        let r = self.open_unit(prefix, &unit, out);
        self.buf = unit;
        self.buf.clear();
        r
    }

    fn begin_trailer(&mut self, input: &mut &[u8]) -> Result<()> {
        let Stage::Segments { key } = std::mem::replace(&mut self.stage, Stage::Failed) else {
            unreachable!("segment stage")
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

    fn check_end(&mut self) -> Result<()> {
        if self.current.is_some() {
            return Err(Error::Truncated);
        }
        if matches!(self.stage, Stage::Segments { .. })
            && (!self.buf.is_empty() || self.need.is_some())
        {
            return Err(Error::Truncated);
        }
        if self.parts.is_empty() {
            return Err(Error::Truncated);
        }
        match &self.stage {
            Stage::Trailer { key } => {
                let Layout::Table(table) = trailer::decode(key, &self.buf)? else {
                    unreachable!("decode returns tables")
                };
                if table.len() > self.parts.len() && table[..self.parts.len()] == self.parts[..] {
                    return Err(Error::Truncated);
                }
                if table != self.parts {
                    return Err(Error::Malformed("parts do not match the trailer's table"));
                }
                Ok(())
            }
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
            _ => Ok(()),
        }
    }
}

impl Transform for BodyOpener {
    fn update(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<()> {
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

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<()> {
        match self.stage {
            Stage::Header { .. } => {
                let e = if self.buf.is_empty() {
                    Error::Truncated
                } else {
                    Header::parse(&self.buf).err().unwrap_or(Error::Truncated)
                };
                self.fail(e)
            }
            Stage::Failed => Err(Error::Malformed("finish after an error")),
            _ => match self.check_end() {
                Ok(()) => Ok(()),
                Err(e) => self.fail(e),
            },
        }
    }
}

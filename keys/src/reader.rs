//! Random access to a whole body in a seekable source (a downloaded object, a file): the
//! offline recovery path, and the reference for how the gateway locates bytes.

use std::io::{Read, Seek, SeekFrom, Write};

use crate::format::{HEADER_SIZE, SEGMENT_PREFIX_SIZE, SEGMENT_SIZE};
use crate::header::{Header, ObjectName, PayloadKey};
use crate::keyring::Keyring;
use crate::layout::{Layout, SizeInfo, plaintext_size};
use crate::open::BodyOpener;
use crate::range::RangeOpener;
use crate::segment::{Prefix, parse_prefix};
use crate::transform::Transform;
use crate::{Error, Result, trailer};

/// A verified object in a seekable source.
pub struct ObjectReader<R> {
    src: R,
    key: PayloadKey,
    /// The layout, when the body's size (and trailer) give one that checks out; `None`
    /// for an irregular body without a trailer, which can only be walked (SPEC 6.3).
    layout: Option<Layout>,
    body_len: u64,
    /// `P` of the verified header; `None` once part lengths go unchecked.
    part_size: Option<u64>,
}

fn read_exact_at<R: Read + Seek>(src: &mut R, offset: u64, buf: &mut [u8]) -> Result<()> {
    src.seek(SeekFrom::Start(offset))?;
    src.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::Truncated
        } else {
            e.into()
        }
    })
}

impl<R: Read + Seek> ObjectReader<R> {
    /// Reads and verifies the header, then learns the layout from the body's size (and its
    /// trailer, if the size says there is one; SPEC 6.1), and checks that the segment
    /// prefixes at every part boundary agree with it.
    ///
    /// # Errors
    /// Any header error of SPEC 5.1, or a body too short for one segment.
    pub fn open(mut src: R, keyring: &Keyring, name: &ObjectName<'_>) -> Result<Self> {
        let body_len = src.seek(SeekFrom::End(0))?;
        let mut head = vec![0u8; HEADER_SIZE.min(usize::try_from(body_len).unwrap_or(HEADER_SIZE))];
        read_exact_at(&mut src, 0, &mut head)?;
        let verified = Header::parse(&head)?.verify(keyring, name)?;
        let part_size = verified.header().part_size();
        let key = verified.into_payload_key();
        let layout = match plaintext_size(body_len)? {
            SizeInfo::Aligned(size) => Layout::regular(size, part_size).ok(),
            SizeInfo::Trailer => read_trailer(&mut src, &key, body_len).ok(),
        };
        let mut reader = Self {
            src,
            key,
            layout,
            body_len,
            part_size: Some(part_size),
        };
        if let Some(layout) = &reader.layout
            && !boundaries_agree(&mut reader.src, layout)?
        {
            reader.layout = None;
        }
        Ok(reader)
    }

    /// Walks leave the part lengths of a body without a trailer unchecked (see
    /// [`BodyOpener::unchecked_part_lengths`]): only for recovering an irregular object
    /// whose layout trailer was never written.
    #[must_use]
    pub fn unchecked_part_lengths(mut self) -> Self {
        self.part_size = None;
        self
    }

    /// The object's plaintext size, when known without walking the body.
    #[must_use]
    pub fn size(&self) -> Option<u64> {
        self.layout.as_ref().map(Layout::size)
    }

    /// The object's layout, when known without walking the body.
    #[must_use]
    pub fn layout(&self) -> Option<&Layout> {
        self.layout.as_ref()
    }

    /// Writes plaintext bytes `start..=end` to `out`, reading only the segments they need
    /// (or, for a body that can only be walked, walking it and keeping those bytes).
    ///
    /// # Errors
    /// `RangeNotSatisfiable`, or any segment error.
    pub fn read_range(&mut self, start: u64, end: u64, out: &mut impl Write) -> Result<()> {
        let Some(layout) = self.layout.clone() else {
            let mut window = RangeWriter::new(start, end, out);
            self.read_all(&mut window)?;
            let size = window.position();
            return if size <= start {
                Err(Error::RangeNotSatisfiable { start, end, size })
            } else {
                Ok(())
            };
        };
        let (mut opener, ct) = RangeOpener::new(&self.key, layout, start, end)?;
        self.src.seek(SeekFrom::Start(ct.start))?;
        let mut limited = (&mut self.src).take(ct.end - ct.start + 1);
        pump(&mut limited, &mut opener, out)
    }

    /// Writes the whole plaintext to `out`, walking every segment (and the trailer).
    ///
    /// # Errors
    /// Any error of SPEC 5.2 or 5.3.
    pub fn read_all(&mut self, out: &mut impl Write) -> Result<()> {
        let mut opener = BodyOpener::after_header(self.key.duplicate());
        opener = match self.part_size {
            Some(p) => opener.expect_part_size(p),
            None => opener.unchecked_part_lengths(),
        };
        // The body's length tells whether a trailer may follow (SPEC 5.2), found layout or
        // not: without it a part after one shorter than P was written out before the
        // walk's end failed it (the bodies the length rule is for have no layout that
        // agrees), where the gateway's GET fails at its start.
        // A length in the trailer class is not proof of one where no layout was found: an
        // irregular body whose trailer was never written can have any length (SPEC 6.1),
        // and is read with its part lengths unchecked.
        match (plaintext_size(self.body_len), self.layout.is_some()) {
            (Ok(SizeInfo::Trailer), true) => opener = opener.expect_trailer(true),
            (Ok(SizeInfo::Aligned(_)), _) => opener = opener.expect_trailer(false),
            _ => {}
        }
        self.src.seek(SeekFrom::Start(HEADER_SIZE as u64))?;
        let mut limited = (&mut self.src).take(self.body_len - HEADER_SIZE as u64);
        pump(&mut limited, &mut opener, out)
    }
}

fn read_trailer<R: Read + Seek>(src: &mut R, key: &PayloadKey, body_len: u64) -> Result<Layout> {
    let mut last8 = [0u8; 8];
    read_exact_at(src, body_len - 8, &mut last8)?;
    let len = trailer::trailer_len(&last8, body_len)?;
    let mut t = vec![0u8; usize::try_from(len).map_err(|_| Error::Malformed("trailer length"))?];
    read_exact_at(src, body_len - len, &mut t)?;
    trailer::decode(key, &t, body_len)
}

/// Whether the segment prefixes at the part starts and at the end name the parts the
/// layout puts there (a cheap check that the part size hint, or the table, describes
/// this body).
fn boundaries_agree<R: Read + Seek>(src: &mut R, layout: &Layout) -> Result<bool> {
    let mut prefix = [0u8; SEGMENT_PREFIX_SIZE];
    // Every predicted part start, and the object's last segment: if all name the part
    // the layout says, the body has exactly the layout's parts.
    let last = layout.size().checked_sub(1).and_then(|o| layout.locate(o));
    let checks = layout
        .part_starts()
        .into_iter()
        .chain(last.map(|l| (l.id.part, l.ciphertext_offset)));
    for (part, offset) in checks {
        match read_exact_at(src, offset, &mut prefix) {
            Ok(()) => {}
            Err(Error::Truncated) => return Ok(false),
            Err(e) => return Err(e),
        }
        if !matches!(parse_prefix(&prefix), Some(Prefix::Segment { part: p, .. }) if p == part) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A writer that passes on only bytes `start..=end` (of everything written to it) to
/// `out`: a range of a stream that can only be read front to back.
pub struct RangeWriter<'a, W> {
    start: u64,
    end: u64,
    pos: u64,
    out: &'a mut W,
}

impl<'a, W: Write> RangeWriter<'a, W> {
    /// Keeps bytes `start..=end`.
    pub fn new(start: u64, end: u64, out: &'a mut W) -> Self {
        Self {
            start,
            end,
            pos: 0,
            out,
        }
    }

    /// How many bytes were written to it in all (the stream's length, once it ended).
    #[must_use]
    pub fn position(&self) -> u64 {
        self.pos
    }
}

impl<W: Write> Write for RangeWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.pos + buf.len() as u64;
        let from = self.start.clamp(self.pos, end);
        let to = self.end.saturating_add(1).clamp(self.pos, end);
        let at = |x: u64| usize::try_from(x - self.pos).unwrap_or(0);
        self.out.write_all(&buf[at(from)..at(to)])?;
        self.pos = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Runs everything `src` yields through `t` into `out`, a few segments at a time.
///
/// # Errors
/// Reading, writing, or whatever `t` rejects.
pub fn pump(src: &mut impl Read, t: &mut impl Transform, out: &mut impl Write) -> Result<()> {
    let mut inbuf = vec![0u8; 4 * SEGMENT_SIZE];
    let mut outbuf = crate::Output::new();
    loop {
        let n = match src.read(&mut inbuf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        t.update(&inbuf[..n], &mut outbuf)?;
        out.write_all(&outbuf)?;
        outbuf.clear();
    }
    t.finish(&mut outbuf)?;
    out.write_all(&outbuf)?;
    Ok(())
}

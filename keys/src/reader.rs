//! Random access to a whole body in a seekable source (a downloaded object, a file): the
//! offline recovery path, and the reference for how the gateway locates bytes.

use std::io::{Read, Seek, SeekFrom, Write};

use crate::format::{HEADER_SIZE, SEGMENT_SIZE};
use crate::header::{Header, ObjectName, PayloadKey};
use crate::keyring::Keyring;
use crate::layout::{Layout, SizeInfo, plaintext_size};
use crate::open::BodyOpener;
use crate::range::RangeOpener;
use crate::transform::Transform;
use crate::{Error, Result, trailer};

/// A verified object in a seekable source, with its layout known.
pub struct ObjectReader<R> {
    src: R,
    key: PayloadKey,
    layout: Layout,
    body_len: u64,
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
    /// trailer, if the size says there is one; SPEC 6.1).
    ///
    /// # Errors
    /// Any header error of SPEC 5.1, or a malformed size or trailer.
    pub fn open(mut src: R, keyring: &Keyring, name: &ObjectName<'_>) -> Result<Self> {
        let body_len = src.seek(SeekFrom::End(0))?;
        let mut head = vec![0u8; HEADER_SIZE.min(usize::try_from(body_len).unwrap_or(HEADER_SIZE))];
        read_exact_at(&mut src, 0, &mut head)?;
        let verified = Header::parse(&head)?.verify(keyring, name)?;
        let part_size = verified.header().part_size();
        let key = verified.into_payload_key();
        let layout = match plaintext_size(body_len)? {
            SizeInfo::Aligned(size) => Layout::regular(size, part_size)?,
            SizeInfo::Trailer => {
                let mut last8 = [0u8; 8];
                read_exact_at(&mut src, body_len - 8, &mut last8)?;
                let len = trailer::trailer_len(&last8, body_len)?;
                let mut t = vec![
                    0u8;
                    usize::try_from(len)
                        .map_err(|_| Error::Malformed("trailer length"))?
                ];
                read_exact_at(&mut src, body_len - len, &mut t)?;
                let layout = trailer::decode(&key, &t)?;
                trailer::check_fits(&layout, len, body_len)?;
                layout
            }
        };
        Ok(Self {
            src,
            key,
            layout,
            body_len,
        })
    }

    /// The object's plaintext size.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.layout.size()
    }

    /// The object's layout.
    #[must_use]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Writes plaintext bytes `start..=end` to `out`, reading only the segments they need.
    ///
    /// # Errors
    /// `RangeNotSatisfiable`, or any segment error.
    pub fn read_range(&mut self, start: u64, end: u64, out: &mut impl Write) -> Result<()> {
        let (mut opener, ct) = RangeOpener::new(&self.key, self.layout.clone(), start, end)?;
        self.src.seek(SeekFrom::Start(ct.start))?;
        let mut limited = (&mut self.src).take(ct.end - ct.start + 1);
        pump(&mut limited, &mut opener, out)
    }

    /// Writes the whole plaintext to `out`, walking every segment (and the trailer).
    ///
    /// # Errors
    /// Any error of SPEC 5.2 or 5.3.
    pub fn read_all(&mut self, out: &mut impl Write) -> Result<()> {
        let key = self.key.duplicate();
        let mut opener = BodyOpener::after_header(key);
        self.src.seek(SeekFrom::Start(HEADER_SIZE as u64))?;
        let mut limited = (&mut self.src).take(self.body_len - HEADER_SIZE as u64);
        pump(&mut limited, &mut opener, out)
    }
}

/// Runs everything `src` yields through `t` into `out`, a few segments at a time.
///
/// # Errors
/// Reading, writing, or whatever `t` rejects.
pub fn pump(src: &mut impl Read, t: &mut impl Transform, out: &mut impl Write) -> Result<()> {
    let mut inbuf = vec![0u8; 4 * SEGMENT_SIZE];
    let mut outbuf = Vec::with_capacity(5 * SEGMENT_SIZE);
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

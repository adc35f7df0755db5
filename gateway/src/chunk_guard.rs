//! A bound on the chunks of an aws-chunked request body, enforced before s3s sees them.
//!
//! s3s collects each aws-chunked chunk whole (up to the 4 GiB a chunk header can declare)
//! before it verifies the chunk's signature or hands a byte on, so one request could make
//! the gateway hold gigabytes. Clients differ: the SDKs that sign chunks send 8 KiB to
//! 1 MiB (aws-sdk-rust and minio-go 64 KiB, botocore 1 MiB), while the AWS common runtime
//! (aws-cli and boto3 with CRT, the Java CRT client, Mountpoint) sends a whole body or part
//! as one chunk with `STREAMING-UNSIGNED-PAYLOAD-TRAILER`. This wrapper reads the framing
//! as the bytes pass:
//!
//! - a signed chunk may declare at most [`MAX_CHUNK`]: its signature covers the whole
//!   chunk, so it cannot be cut, and no client sends more;
//! - an unsigned chunk above [`MAX_CHUNK`] is re-framed into chunks of [`PIECE`] bytes (the
//!   data passes unchanged, only the size lines are new; nothing signs them), and any chunk
//!   longer than the declared decoded length is refused at its header;
//! - a header line that is not 1 to 8 hex digits followed by `\r\n` or by `;` and an
//!   extension ending in `\r\n` is refused. s3s reads only the first 8 hex digits of a
//!   size and ignores what follows them up to `;` or `\r` (`ffffffff \r\n`,
//!   `000000010\r\n`), so a looser reading here could bound a different size than the
//!   one s3s buffers;
//! - after an error the guard stays failed and passes nothing more.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use s3s::StdError;
use s3s::stream::{ByteStream, RemainingLength};

/// Largest chunk passed as it came: far above what signing clients send, and the most
/// memory one request's chunk may take in s3s.
pub(crate) const MAX_CHUNK: u64 = 16 << 20;

/// Size of the chunks a larger unsigned chunk is cut into.
pub(crate) const PIECE: u64 = 1 << 20;

/// Longest chunk header line: the size in hex, `;chunk-signature=` and 64 hex digits.
const MAX_HEADER_LINE: usize = 256;

/// Most hex digits in a chunk size: s3s reads a size as a `u32`.
const MAX_SIZE_DIGITS: u8 = 8;

/// Whether the chunks of a body carry signatures, from its `x-amz-content-sha256`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]` (and any other `STREAMING-` value,
    /// which s3s judges): chunks are passed whole or refused.
    Signed,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`, with the declared decoded length if it parsed.
    Unsigned { decoded: Option<u64> },
}

/// Where in a chunk header line the next byte lies.
#[derive(Clone, Copy)]
enum Line {
    /// The size: this many hex digits read so far.
    Digits(u8),
    /// A `;` extension, up to the line's end.
    Ext,
    /// The `\r` after the size: only `\n` may follow.
    Cr,
}

/// Where in the framing the next byte lies.
#[derive(Clone, Copy)]
enum At {
    /// A chunk header, held back until its line ends: `size` so far from its hex digits.
    Header { size: u64, line: Line },
    /// Chunk data and its closing CRLF, passed as they come: `left` bytes.
    Data { left: u64 },
    /// Data of a re-framed chunk: `left` bytes of it, `piece` of them in the current piece.
    Cut { left: u64, piece: u64 },
    /// The CRLF closing a re-framed chunk: `seen` bytes of it read (it is not passed on:
    /// each piece got its own).
    CutEnd { seen: usize },
    /// After the last (empty) chunk: trailers, which s3s bounds and checks itself.
    Done,
    /// The framing broke the bound or the grammar: nothing more goes out.
    Failed,
}

/// The body of an aws-chunked request, checked (and re-framed) as it passes.
pub(crate) struct ChunkGuard {
    inner: s3s::Body,
    framing: Framing,
    at: At,
    /// The current header line (held back: it may be replaced).
    line: Vec<u8>,
    /// Data chunk bytes declared so far, for [`Framing::Unsigned`]'s bound.
    declared: u64,
    /// What is ready to go out.
    out: VecDeque<Bytes>,
    /// Whether the body underneath has ended.
    ended: bool,
}

impl ChunkGuard {
    /// Wraps the body of an aws-chunked request.
    #[must_use]
    pub(crate) fn new(inner: s3s::Body, framing: Framing) -> Self {
        Self {
            inner,
            framing,
            at: header(),
            line: Vec::new(),
            declared: 0,
            out: VecDeque::new(),
            ended: false,
        }
    }

    /// Follows the framing over `bytes`, queueing what goes out; an error names what broke
    /// the bound.
    fn follow(&mut self, bytes: &Bytes) -> Result<(), &'static str> {
        let mut at = 0;
        while at < bytes.len() {
            match self.at {
                At::Failed => return Err("an aws-chunked body continued after an error"),
                At::Done => {
                    self.out.push_back(bytes.slice(at..));
                    return Ok(());
                }
                At::Data { left } => {
                    let n = take(left, bytes.len() - at);
                    self.out.push_back(bytes.slice(at..at + n));
                    at += n;
                    let left = left - n as u64;
                    self.at = if left == 0 {
                        header()
                    } else {
                        At::Data { left }
                    };
                }
                At::Cut { left, mut piece } => {
                    if piece == 0 {
                        piece = left.min(PIECE);
                        self.out.push_back(format!("{piece:x}\r\n").into());
                    }
                    let n = take(piece, bytes.len() - at);
                    self.out.push_back(bytes.slice(at..at + n));
                    at += n;
                    let (left, piece) = (left - n as u64, piece - n as u64);
                    if piece == 0 {
                        self.out.push_back(Bytes::from_static(b"\r\n"));
                    }
                    self.at = if left == 0 {
                        At::CutEnd { seen: 0 }
                    } else {
                        At::Cut { left, piece }
                    };
                }
                At::CutEnd { seen } => {
                    if bytes[at] != b"\r\n"[seen] {
                        return Err("an aws-chunked chunk does not end with CRLF");
                    }
                    at += 1;
                    self.at = if seen == 1 {
                        header()
                    } else {
                        At::CutEnd { seen: 1 }
                    };
                }
                At::Header { size, line } => {
                    let b = bytes[at];
                    at += 1;
                    self.line.push(b);
                    if self.line.len() > MAX_HEADER_LINE {
                        return Err("an aws-chunked chunk header line is too long");
                    }
                    self.at = match (line, b) {
                        (Line::Digits(n), _) if n < MAX_SIZE_DIGITS && b.is_ascii_hexdigit() => {
                            let size = size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0));
                            self.check_size(size)?;
                            At::Header {
                                size,
                                line: Line::Digits(n + 1),
                            }
                        }
                        (Line::Digits(n), b';') if n > 0 => At::Header {
                            size,
                            line: Line::Ext,
                        },
                        (Line::Digits(n), b'\r') if n > 0 => At::Header {
                            size,
                            line: Line::Cr,
                        },
                        (Line::Digits(_), _) => {
                            return Err("an aws-chunked chunk size is not 1 to 8 hex digits");
                        }
                        (Line::Ext, b'\n') if self.line.ends_with(b"\r\n") => {
                            self.end_header(size, true)?;
                            continue;
                        }
                        (Line::Ext, b'\n') => {
                            return Err("an aws-chunked chunk header does not end with CRLF");
                        }
                        (Line::Ext, _) => At::Header { size, line },
                        (Line::Cr, b'\n') => {
                            self.end_header(size, false)?;
                            continue;
                        }
                        (Line::Cr, _) => {
                            return Err("an aws-chunked chunk size is not followed by CRLF");
                        }
                    };
                }
            }
        }
        Ok(())
    }

    /// Refuses a chunk size (or the part of one read so far) that breaks the bound.
    fn check_size(&self, size: u64) -> Result<(), &'static str> {
        match self.framing {
            Framing::Signed if size > MAX_CHUNK => {
                Err("an aws-chunked signed chunk is larger than the gateway accepts (16 MiB)")
            }
            Framing::Unsigned { decoded: Some(d) } if self.declared.saturating_add(size) > d => {
                Err("an aws-chunked chunk runs past the declared x-amz-decoded-content-length")
            }
            Framing::Unsigned { decoded: None } if size > MAX_CHUNK => {
                Err("an aws-chunked chunk is larger than the gateway accepts (16 MiB)")
            }
            _ => Ok(()),
        }
    }

    /// A header line of a chunk of `size` ended: passes it on, or cuts the chunk.
    fn end_header(&mut self, size: u64, ext: bool) -> Result<(), &'static str> {
        self.declared = self.declared.saturating_add(size);
        let line = std::mem::take(&mut self.line);
        if size == 0 {
            self.out.push_back(line.into());
            self.at = At::Done;
        } else if size <= MAX_CHUNK {
            self.out.push_back(line.into());
            self.at = At::Data { left: size + 2 };
        } else if ext {
            // An extension (a signature) would no longer match the cut pieces.
            return Err(
                "an aws-chunked chunk with extensions is larger than the gateway \
                        accepts (16 MiB)",
            );
        } else {
            self.at = At::Cut {
                left: size,
                piece: 0,
            };
        }
        Ok(())
    }

    /// Stays failed: drops what was queued and passes nothing more.
    fn fail(&mut self) {
        self.at = At::Failed;
        self.out.clear();
        self.line.clear();
        self.ended = true;
    }
}

/// The state at the start of a chunk header.
fn header() -> At {
    At::Header {
        size: 0,
        line: Line::Digits(0),
    }
}

/// How many of `have` bytes to take when `want` are wanted.
fn take(want: u64, have: usize) -> usize {
    usize::try_from(want).unwrap_or(usize::MAX).min(have)
}

impl Stream for ChunkGuard {
    type Item = Result<Bytes, StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(b) = self.out.pop_front() {
                return Poll::Ready(Some(Ok(b)));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            match std::task::ready!(Pin::new(&mut self.inner).poll_next(cx)) {
                Some(Ok(bytes)) => {
                    if let Err(why) = self.follow(&bytes) {
                        self.fail();
                        return Poll::Ready(Some(Err(why.into())));
                    }
                }
                Some(Err(e)) => {
                    self.fail();
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    // A header line held back at the end goes on. s3s then ends its stream
                    // short of the declared length, which the upload's body check
                    // (`body.rs`, `verify_end`) refuses as an incomplete body.
                    self.ended = true;
                    let line = std::mem::take(&mut self.line);
                    if !line.is_empty() {
                        self.out.push_back(line.into());
                    }
                }
            }
        }
    }
}

impl ByteStream for ChunkGuard {
    fn remaining_length(&self) -> RemainingLength {
        // Re-framing changes the length of the framing; s3s reads the length of an
        // aws-chunked body from x-amz-decoded-content-length.
        RemainingLength::unknown()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes that go out for `pieces`, or the error.
    fn run(framing: Framing, pieces: &[&[u8]]) -> Result<Vec<u8>, &'static str> {
        let mut g = ChunkGuard::new(s3s::Body::empty(), framing);
        for p in pieces {
            g.follow(&Bytes::copy_from_slice(p))?;
        }
        Ok(g.out.iter().flat_map(|b| b.iter().copied()).collect())
    }

    fn follow(pieces: &[&[u8]]) -> Result<(), &'static str> {
        run(Framing::Signed, pieces).map(drop)
    }

    const UNSIGNED: Framing = Framing::Unsigned { decoded: None };

    #[test]
    fn framing_of_any_piece_sizes_passes_unchanged() {
        let sig = format!(";chunk-signature={}", "a".repeat(64));
        let body = format!(
            "10000{sig}\r\n{}\r\n5{sig}\r\nhello\r\n0{sig}\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
            "x".repeat(0x10000)
        );
        assert_eq!(
            run(Framing::Signed, &[body.as_bytes()]).unwrap(),
            body.as_bytes()
        );
        let pieces: Vec<&[u8]> = body.as_bytes().chunks(7).collect();
        assert_eq!(run(Framing::Signed, &pieces).unwrap(), body.as_bytes());
        assert_eq!(run(UNSIGNED, &pieces).unwrap(), body.as_bytes());
        assert_eq!(follow(&[b"1000000\r\n"]), Ok(()), "16 MiB is accepted");
    }

    #[test]
    fn a_signed_chunk_over_the_bound_or_an_endless_header_fails() {
        assert!(follow(&[b"1000001\r\n"]).is_err());
        assert!(follow(&[b"ffff", b"ffff;chunk-signature=0\r\n"]).is_err());
        // After a first chunk too.
        assert!(follow(&[b"3\r\nabc\r\n", b"2000000\r\n"]).is_err());
        assert!(follow(&[&[b'0'; 300]]).is_err());
        assert!(follow(&[b"5;", &[b'x'; 300]]).is_err());
        let gib = Framing::Unsigned {
            decoded: Some(1 << 30),
        };
        assert!(
            run(gib, &[b"1000001;x=y\r\n"]).is_err(),
            "a signature can't be cut"
        );
        assert!(run(gib, &[b"1000001\r\n"]).is_ok());
        assert!(
            run(UNSIGNED, &[b"1000001\r\n"]).is_err(),
            "no declared length"
        );
    }

    /// Regression: s3s reads the first 8 hex digits of a size and ignores the rest of the
    /// field, so each of these would have been bounded at one size and buffered at another.
    #[test]
    fn a_header_s3s_would_read_differently_fails() {
        let gib = Framing::Unsigned {
            decoded: Some(1 << 40),
        };
        for line in [
            &b"1 \r\n"[..],
            b"ffffffff \r\n",
            b"000000010\r\n",
            b"100000000\r\n",
            b"1x\r\n",
            b"x\r\n",
            b"\r\n",
            b";chunk-signature=0\r\n",
            b"5\n",
            b"5\rx\n",
            b"5;x=y\n",
        ] {
            for framing in [Framing::Signed, gib] {
                assert!(
                    run(framing, &[line]).is_err(),
                    "{}",
                    String::from_utf8_lossy(line)
                );
            }
        }
        assert!(
            run(gib, &[b"00000010\r\n"]).is_ok(),
            "8 digits with leading zeros"
        );
        assert!(run(gib, &[b"A;x=y\r\n"]).is_ok(), "upper-case hex");
    }

    /// A body that yields the given pieces; `None` is an error of the body itself.
    struct Pieces(VecDeque<Option<&'static [u8]>>);

    impl Stream for Pieces {
        type Item = Result<Bytes, StdError>;

        fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            Poll::Ready(self.0.pop_front().map(|p| match p {
                Some(bytes) => Ok(Bytes::from_static(bytes)),
                None => Err("the connection broke".into()),
            }))
        }
    }

    impl ByteStream for Pieces {}

    /// Everything the guard over `pieces` yields, errors as text.
    fn drain(pieces: &[Option<&'static [u8]>]) -> Vec<Result<Bytes, String>> {
        use futures::StreamExt;
        let inner: s3s::stream::DynByteStream = Box::pin(Pieces(pieces.iter().copied().collect()));
        let mut g = ChunkGuard::new(inner.into(), Framing::Signed);
        let mut got = Vec::new();
        futures::executor::block_on(async {
            while let Some(item) = g.next().await {
                got.push(item.map_err(|e| e.to_string()));
            }
        });
        got
    }

    #[test]
    fn a_guard_that_failed_passes_nothing_more() {
        let next = Some(&b"3\r\nabc\r\n0\r\n\r\n"[..]);
        for (failing, passed) in [
            (Some(&b"c\r\n1 \r\n"[..]), &b"3\r\nab"[..]),
            (None, b"3\r\nab"),
        ] {
            let got = drain(&[Some(b"3\r\nab"), failing, next]);
            let errors = got.iter().filter(|i| i.is_err()).count();
            assert_eq!(errors, 1, "{got:?}");
            assert!(
                got.last().unwrap().is_err(),
                "nothing after the error: {got:?}"
            );
            let out: Vec<u8> = got.iter().flatten().flat_map(|b| b.to_vec()).collect();
            // What the failing piece queued is dropped with it.
            assert_eq!(out, passed);
        }
        let mut g = ChunkGuard::new(s3s::Body::empty(), Framing::Signed);
        g.at = At::Failed;
        assert!(g.follow(&Bytes::from_static(b"3\r\nabc\r\n")).is_err());
        assert!(g.out.is_empty());
    }

    /// Regression: the AWS common runtime sends a whole part as one unsigned chunk.
    #[test]
    fn a_large_unsigned_chunk_is_cut_into_pieces_with_the_same_data() {
        let data: Vec<u8> = (0..(MAX_CHUNK + PIECE + 5))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut body = format!("{:x}\r\n", data.len()).into_bytes();
        body.extend_from_slice(&data);
        body.extend_from_slice(b"\r\n3\r\nabc\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n");
        for step in [body.len(), 65_536, 1000] {
            let pieces: Vec<&[u8]> = body.chunks(step).collect();
            let framing = Framing::Unsigned {
                decoded: Some(data.len() as u64 + 3),
            };
            let out = run(framing, &pieces).unwrap();
            let mut rest = &out[..];
            let mut sizes = Vec::new();
            let mut got = Vec::new();
            loop {
                let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
                let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16);
                let n = n.unwrap();
                if n == 0 {
                    break;
                }
                sizes.push(n as u64);
                got.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
                assert_eq!(&rest[eol + 2 + n..eol + 4 + n], b"\r\n");
                rest = &rest[eol + 4 + n..];
            }
            assert_eq!(rest, b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n");
            assert!(sizes.iter().all(|&n| n <= PIECE), "{sizes:?}");
            assert_eq!(sizes.len(), 18 + 1);
            let mut want = data.clone();
            want.extend_from_slice(b"abc");
            assert!(got == want, "the data passes unchanged (step {step})");
        }
    }

    #[test]
    fn unsigned_chunks_past_the_declared_length_or_badly_closed_fail() {
        let declared = |d| Framing::Unsigned { decoded: Some(d) };
        assert!(run(declared(10), &[b"ffffffff\r\n"]).is_err());
        assert!(run(declared(10), &[b"a\r\n0123456789\r\n1\r\n"]).is_err());
        assert!(run(declared(10), &[b"a\r\n0123456789\r\n0\r\n"]).is_ok());
        assert!(run(declared(u64::MAX), &[b"ffffffff\r\n"]).is_ok());
        let size = MAX_CHUNK + 1;
        let mut body = format!("{size:x}\r\n").into_bytes();
        body.resize(body.len() + usize::try_from(size).unwrap(), b'x');
        body.extend_from_slice(b"XY");
        assert!(
            run(declared(size), &[&body]).is_err(),
            "a cut chunk ends with CRLF"
        );
    }
}

//! A bound on the chunks of an aws-chunked request body, checked before s3s sees them.
//!
//! s3s collects each aws-chunked chunk whole (up to the 4 GiB a chunk header can declare)
//! before it verifies the chunk's signature or hands a byte on, so one request could make
//! the gateway hold gigabytes; with `STREAMING-UNSIGNED-PAYLOAD-TRAILER` no signature is
//! needed to try. SDKs send chunks of 8 KiB to 1 MiB (aws-sdk-rust and minio-go 64 KiB,
//! botocore 1 MiB). This wrapper reads the framing as the bytes pass (they pass unchanged)
//! and fails the body at a chunk header that declares more than [`MAX_CHUNK`], or a header
//! line longer than any valid one.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use s3s::StdError;
use s3s::stream::{ByteStream, RemainingLength};

/// Largest chunk accepted: far above what clients send, and the most memory one request's
/// chunk may take in s3s.
pub(crate) const MAX_CHUNK: u64 = 16 << 20;

/// Longest chunk header line: the size in hex, `;chunk-signature=` and 64 hex digits.
const MAX_HEADER_LINE: usize = 256;

/// Where in the framing the next byte lies.
#[derive(Clone, Copy)]
enum At {
    /// A chunk header: `size` so far from its hex digits, `digits` still being read.
    Header { size: u64, digits: bool, len: usize },
    /// Chunk data and its closing CRLF: `left` bytes.
    Data { left: u64 },
    /// After the last (empty) chunk: trailers, which s3s bounds itself; or framing this
    /// guard does not follow, which s3s refuses.
    Done,
}

/// The body of an aws-chunked request, checked as it passes.
pub(crate) struct ChunkGuard {
    inner: s3s::Body,
    at: At,
}

impl ChunkGuard {
    /// Wraps the body of an aws-chunked request.
    #[must_use]
    pub(crate) fn new(inner: s3s::Body) -> Self {
        Self {
            inner,
            at: At::Header {
                size: 0,
                digits: true,
                len: 0,
            },
        }
    }

    /// Follows the framing over `bytes`; an error names what broke the bound.
    fn follow(&mut self, mut bytes: &[u8]) -> Result<(), &'static str> {
        while !bytes.is_empty() {
            match &mut self.at {
                At::Done => return Ok(()),
                At::Data { left } => {
                    let n = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len());
                    bytes = &bytes[n..];
                    *left -= n as u64;
                    if *left == 0 {
                        self.at = At::Header {
                            size: 0,
                            digits: true,
                            len: 0,
                        };
                    }
                }
                At::Header { size, digits, len } => {
                    let b = bytes[0];
                    bytes = &bytes[1..];
                    *len += 1;
                    if *len > MAX_HEADER_LINE {
                        return Err("an aws-chunked chunk header line is too long");
                    }
                    if b == b'\n' {
                        self.at = match *size {
                            0 => At::Done,
                            n => At::Data { left: n + 2 },
                        };
                        continue;
                    }
                    if !*digits {
                        continue;
                    }
                    match (b as char).to_digit(16) {
                        Some(d) => {
                            *size = *size * 16 + u64::from(d);
                            if *size > MAX_CHUNK {
                                return Err("an aws-chunked chunk is larger than the gateway \
                                            accepts (16 MiB)");
                            }
                        }
                        None if b == b';' || b == b'\r' => *digits = false,
                        // Not framing this guard follows: s3s refuses it.
                        None => self.at = At::Done,
                    }
                }
            }
        }
        Ok(())
    }
}

impl Stream for ChunkGuard {
    type Item = Result<Bytes, StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = std::task::ready!(Pin::new(&mut self.inner).poll_next(cx));
        if let Some(Ok(bytes)) = &item
            && let Err(why) = self.follow(bytes)
        {
            self.at = At::Done;
            return Poll::Ready(Some(Err(why.into())));
        }
        Poll::Ready(item)
    }
}

impl ByteStream for ChunkGuard {
    fn remaining_length(&self) -> RemainingLength {
        self.inner.remaining_length()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follow(pieces: &[&[u8]]) -> Result<(), &'static str> {
        let mut g = ChunkGuard::new(s3s::Body::empty());
        pieces.iter().try_for_each(|p| g.follow(p))
    }

    #[test]
    fn framing_of_any_piece_sizes_passes() {
        let sig = format!(";chunk-signature={}", "a".repeat(64));
        let body = format!(
            "10000{sig}\r\n{}\r\n5{sig}\r\nhello\r\n0{sig}\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
            "x".repeat(0x10000)
        );
        assert_eq!(follow(&[body.as_bytes()]), Ok(()));
        let pieces: Vec<&[u8]> = body.as_bytes().chunks(7).collect();
        assert_eq!(follow(&pieces), Ok(()));
        let unsigned = "1000000\r\n";
        assert_eq!(follow(&[unsigned.as_bytes()]), Ok(()), "16 MiB is accepted");
    }

    #[test]
    fn a_chunk_over_the_bound_or_an_endless_header_fails() {
        assert!(follow(&[b"1000001\r\n"]).is_err());
        assert!(follow(&[b"ffff", b"ffff;chunk-signature=0\r\n"]).is_err());
        // After a first chunk too.
        assert!(follow(&[b"3\r\nabc\r\n", b"2000000\r\n"]).is_err());
        assert!(follow(&[&[b'1'; 300]]).is_err());
        assert!(follow(&[b"5;", &[b'x'; 300]]).is_err());
    }
}

//! Content-defined cut points (FastCDC 2020, FORMAT.md section 5.1) of a buffer, found on
//! two threads with exactly the result of one.
//!
//! A cut depends only on the bytes after the chunk's start, so two chunkings of the same
//! bytes agree from their first common cut on. The first thread chunks the buffer from
//! its start into the second half; the second chunks from the middle, as if a chunk began
//! there. The first cut of the first thread that the second also found joins the two; a
//! chunking of random data meets it within a chunk or two. Where they do not meet (data
//! with no cut points, such as long runs of one byte), the rest is chunked on one thread,
//! so the cuts are always those of a single pass.

use fastcdc::v2020::FastCDC;

use crate::config::ChunkerSizes;

/// Buffers shorter than this are chunked on one thread.
pub const PARALLEL_CDC_MIN: usize = 4 << 20;

/// Chunks the first thread finds past the middle before it stops looking for a meeting
/// point.
const OVERLAP_CHUNKS: usize = 4;

/// `(offset, length)` of the chunks of `buf`, in order, tiling it; the last one ends at the
/// buffer's end whether or not a cut lies there (the caller knows whether more follows).
#[must_use]
pub fn chunks(buf: &[u8], c: ChunkerSizes) -> Vec<(usize, usize)> {
    if buf.len() < PARALLEL_CDC_MIN {
        return one_pass(buf, 0, c);
    }
    let mid = buf.len() / 2;
    let (head, tail) = std::thread::scope(|scope| {
        let tail = scope.spawn(|| one_pass(&buf[mid..], mid, c));
        let mut head = Vec::new();
        let mut past_mid = 0;
        for ch in FastCDC::new(buf, c.min, c.avg, c.max) {
            head.push((ch.offset, ch.length));
            if ch.offset + ch.length > mid {
                past_mid += 1;
                if past_mid == OVERLAP_CHUNKS {
                    break;
                }
            }
        }
        let tail = tail
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (head, tail)
    });
    join(buf, head, &tail, c)
}

/// Joins the first thread's chunks to the second's at their first common cut.
fn join(
    buf: &[u8],
    mut head: Vec<(usize, usize)>,
    tail: &[(usize, usize)],
    c: ChunkerSizes,
) -> Vec<(usize, usize)> {
    let end_of = |&(o, l): &(usize, usize)| o + l;
    if head.last().map(end_of) == Some(buf.len()) {
        return head; // one thread got through it all
    }
    let meeting = head.iter().enumerate().find_map(|(i, ch)| {
        let cut = end_of(ch);
        tail.binary_search_by(|t| end_of(t).cmp(&cut))
            .ok()
            .map(|j| (i, j))
    });
    if let Some((i, j)) = meeting {
        head.truncate(i + 1);
        head.extend_from_slice(&tail[j + 1..]);
    } else {
        let from = head.last().map_or(0, end_of);
        head.extend(one_pass(&buf[from..], from, c));
    }
    head
}

/// The chunks of `buf` on this thread, offsets shifted by `base`.
fn one_pass(buf: &[u8], base: usize, c: ChunkerSizes) -> Vec<(usize, usize)> {
    FastCDC::new(buf, c.min, c.avg, c.max)
        .map(|ch| (base + ch.offset, ch.length))
        .collect()
}

#[cfg(test)]
mod tests {
    use kura_testkit::data::pseudo_random;

    use super::*;

    fn params(min: u32, avg: u32, max: u32) -> ChunkerSizes {
        ChunkerSizes { min, avg, max }
    }

    fn assert_same(buf: &[u8], c: ChunkerSizes) {
        let two = chunks(buf, c);
        assert_eq!(two, one_pass(buf, 0, c), "len {}", buf.len());
        let mut at = 0;
        for &(o, l) in &two {
            assert_eq!(o, at, "chunks tile the buffer");
            at += l;
        }
        assert_eq!(at, buf.len());
    }

    #[test]
    fn two_threads_cut_random_data_where_one_does() {
        for (seed, len) in [
            (1, 16 << 20),
            (2, (16 << 20) - 12_345),
            (3, 5 << 20),
            (4, 9 << 20),
        ] {
            assert_same(
                &pseudo_random(len, seed),
                params(256 << 10, 1 << 20, 4 << 20),
            );
            assert_same(
                &pseudo_random(len, seed),
                params(16 << 10, 64 << 10, 256 << 10),
            );
        }
    }

    #[test]
    fn data_without_cut_points_falls_back_to_one_pass() {
        // Zeros: every chunk is `max` long from wherever it starts, so chunkings from the
        // start and from the middle only meet if the middle is a multiple of `max` away.
        assert_same(
            &vec![0u8; (16 << 20) + 3],
            params(256 << 10, 1 << 20, 4 << 20),
        );
        let text = b"the same line again and again\n".repeat(400_000);
        assert_same(&text, params(256 << 10, 1 << 20, 4 << 20));
        let mut mixed = pseudo_random(6 << 20, 9);
        mixed.extend(vec![7u8; 6 << 20]);
        mixed.extend(pseudo_random(5 << 20, 10));
        assert_same(&mixed, params(256 << 10, 1 << 20, 4 << 20));
    }

    #[test]
    fn small_buffers_are_one_pass() {
        let buf = pseudo_random(1 << 20, 5);
        assert_eq!(
            chunks(&buf, params(16 << 10, 64 << 10, 256 << 10)),
            one_pass(&buf, 0, params(16 << 10, 64 << 10, 256 << 10))
        );
        assert!(chunks(&[], params(16 << 10, 64 << 10, 256 << 10)).is_empty());
    }
}

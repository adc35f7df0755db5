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

    /// `GEAR` as FORMAT.md section 5.1 gives it, by value.
    fn spec_gear() -> Vec<u64> {
        include_str!("../FASTCDC-GEAR.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .flat_map(str::split_whitespace)
            .map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap())
            .collect()
    }

    /// `MASKS[5..=25]` as FORMAT.md section 5.1 gives them.
    const SPEC_MASKS: [u64; 21] = [
        0x0000_0000_0180_4110,
        0x0000_0000_0180_3110,
        0x0000_0000_1803_5100,
        0x0000_0018_0003_5300,
        0x0000_0190_0035_3000,
        0x0000_5900_0353_0000,
        0x0000_d900_0353_0000,
        0x0000_d901_0353_0000,
        0x0000_d903_0353_0000,
        0x0000_d903_1353_0000,
        0x0000_d90f_0353_0000,
        0x0000_d903_0353_7000,
        0x0000_d907_0353_7000,
        0x0000_d907_0753_7000,
        0x0000_d917_0753_7000,
        0x0000_d917_4753_7000,
        0x0000_d917_6753_7000,
        0x0000_d937_6753_7000,
        0x0000_d937_7753_7000,
        0x0000_d937_7757_7000,
        0x0000_db37_7757_7000,
    ];

    /// FORMAT.md section 5.1's `cut`, written from the spec alone.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "log2 of a u32 lies in 0..32"
    )]
    fn spec_cut(src: &[u8], gear: &[u64], sizes: ChunkerSizes) -> usize {
        let (min, avg, max) = (sizes.min as usize, sizes.avg as usize, sizes.max as usize);
        let bits = f64::from(sizes.avg).log2().round() as usize;
        let small = SPEC_MASKS[bits + 1 - 5];
        let large = SPEC_MASKS[bits - 1 - 5];
        let gear_ls = |byte: u8| gear[usize::from(byte)] << 1;
        let mut end = src.len();
        if end <= min {
            return end;
        }
        let mut center = avg;
        if end > max {
            end = max;
        } else if end < center {
            center = end;
        }
        let (mut pair, mut hash) = (min / 2, 0u64);
        for (limit, mask) in [(center / 2, small), (end / 2, large)] {
            while pair < limit {
                let at = 2 * pair;
                hash = (hash << 2).wrapping_add(gear_ls(src[at]));
                if hash & (mask << 1) == 0 {
                    return at;
                }
                hash = hash.wrapping_add(gear[usize::from(src[at + 1])]);
                if hash & mask == 0 {
                    return at + 1;
                }
                pair += 1;
            }
        }
        end
    }

    #[test]
    fn the_spec_gives_the_crates_gear_table_and_cut_points_by_value() {
        let gear = spec_gear();
        let (crate_gear, crate_gear_ls) = fastcdc::v2020::get_gear_with_seed(0);
        assert_eq!(gear, crate_gear.to_vec());
        assert!(
            gear.iter()
                .zip(crate_gear_ls.iter())
                .all(|(g, ls)| g << 1 == *ls)
        );
        for c in [
            params(256 << 10, 1 << 20, 4 << 20),
            params(16 << 10, 64 << 10, 256 << 10),
            params(64, 256, 1024),
        ] {
            let mut text = pseudo_random(9 << 20, 21);
            text.extend(vec![0u8; 5 << 20]);
            let mut at = 0;
            let mut spec = Vec::new();
            while at < text.len() {
                let len = spec_cut(&text[at..], &gear, c);
                spec.push((at, len));
                at += len;
            }
            assert_eq!(spec, one_pass(&text, 0, c), "{c:?}");
        }
    }
}

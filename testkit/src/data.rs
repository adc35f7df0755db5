//! Reproducible test data: the same `(len, seed)` gives the same bytes on every run, and
//! the bytes neither compress nor repeat, so they exercise encryption, chunking and
//! compression as real file contents would.

/// `len` pseudo-random bytes from `seed` (xorshift64; not for cryptography).
#[must_use]
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pseudo_random;

    #[test]
    fn the_same_seed_gives_the_same_bytes_and_another_seed_others() {
        assert_eq!(pseudo_random(1000, 7), pseudo_random(1000, 7));
        assert_ne!(pseudo_random(1000, 7), pseudo_random(1000, 8));
        assert_eq!(pseudo_random(10, 7), pseudo_random(1000, 7)[..10]);
    }
}

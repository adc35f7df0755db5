//! The one source of randomness: the operating system's generator, through ring.

use ring::rand::{SecureRandom, SystemRandom};

/// Fills `buf` with random bytes.
pub(crate) fn fill(buf: &mut [u8]) -> crate::Result<()> {
    SystemRandom::new()
        .fill(buf)
        .map_err(|_| crate::Error::Random)
}

/// A random `u64`.
pub(crate) fn u64() -> crate::Result<u64> {
    let mut b = [0u8; 8];
    fill(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

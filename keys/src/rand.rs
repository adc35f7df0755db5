//! The one source of randomness: the operating system's generator (`getrandom(2)` on Linux).
//!
//! Not aws-lc's generator: it seeds a per-thread state from a CPU-jitter entropy collector,
//! which cost the gateway several percent of its CPU time on threads that sealed only a few
//! objects each.

/// Fills `buf` with random bytes.
pub(crate) fn fill(buf: &mut [u8]) -> crate::Result<()> {
    getrandom::fill(buf).map_err(|_| crate::Error::Random)
}

/// A random `u64`.
pub(crate) fn u64() -> crate::Result<u64> {
    let mut b = [0u8; 8];
    fill(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

//! The one source of randomness for the whole workspace: the operating system's generator
//! (`getrandom(2)` on Linux). The gateway, the repository and the CLI call these functions;
//! nothing else in kura draws random bytes.
//!
//! Not aws-lc's generator: it seeds a per-thread state from a CPU-jitter entropy collector,
//! which cost the gateway several percent of its CPU time on threads that sealed only a few
//! objects each.

/// Fills `buf` with random bytes.
///
/// # Errors
/// [`crate::Error::Random`] when the operating system's generator fails.
pub fn fill(buf: &mut [u8]) -> crate::Result<()> {
    getrandom::fill(buf).map_err(|_| crate::Error::Random)
}

/// A random `u64`.
///
/// # Errors
/// As [`fill`].
pub fn u64() -> crate::Result<u64> {
    let mut b = [0u8; 8];
    fill(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

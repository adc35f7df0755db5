//! Big-endian integer fields read from byte slices whose lengths the caller has checked.

/// `u32` at `off`.
pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(std::array::from_fn(|i| b[off + i]))
}

/// `u64` at `off`.
pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(std::array::from_fn(|i| b[off + i]))
}

/// `N` bytes at `off`.
pub(crate) fn array_at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    std::array::from_fn(|i| b[off + i])
}

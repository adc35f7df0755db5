//! Constants of the object format, named as in `SPEC.md` so that the two read side by side.

/// `MAGIC`: the first four bytes of every kura object body (SPEC 5.1).
pub const MAGIC: [u8; 4] = *b"KURA";
/// `VERSION`: the format version this crate writes and reads (SPEC 5.1).
pub const VERSION: u8 = 0x01;
/// `HEADER_SIZE`: length of the fixed-size header (SPEC 5.1).
pub const HEADER_SIZE: usize = 164;
/// `SEGMENT_SIZE`: plaintext bytes in every segment but the last of a part (SPEC 5.2).
pub const SEGMENT_SIZE: usize = 65_536;
/// `SEGMENT_PREFIX_SIZE`: the clear, authenticated part number, length and part nonce (SPEC 5.2).
pub const SEGMENT_PREFIX_SIZE: usize = 16;
/// Length of the part nonce `R` in every segment prefix (SPEC 5.2).
pub const PART_NONCE_SIZE: usize = 8;
/// `TAG_SIZE`: AEAD tag length of both ciphers (SPEC 4).
pub const TAG_SIZE: usize = 16;
/// `SEGMENT_OVERHEAD`: ciphertext bytes a segment adds to its plaintext (SPEC 5.2).
pub const SEGMENT_OVERHEAD: usize = SEGMENT_PREFIX_SIZE + TAG_SIZE;
/// `FULL_SEGMENT_SIZE`: ciphertext length of a segment holding `SEGMENT_SIZE` bytes.
pub const FULL_SEGMENT_SIZE: usize = SEGMENT_SIZE + SEGMENT_OVERHEAD;
/// `MAX_PART_NUMBER`: the highest part number a body may hold, as in S3 (SPEC 5.2).
pub const MAX_PART_NUMBER: u32 = 10_000;
/// `MAX_PART_SIZE`: the largest part a trailer table may list, as in S3 (SPEC 5.3).
pub const MAX_PART_SIZE: u64 = 5 << 30;
/// `FINAL` bit of a segment prefix's `flags_len` word (SPEC 5.2).
pub const FINAL_FLAG: u32 = 0x8000_0000;
/// Part number field value that starts a trailer instead of a segment (SPEC 5.3).
pub const TRAILER_MARKER: u32 = 0xFFFF_FFFF;
/// Bytes of a trailer before its sealed table: marker, table length, nonce (SPEC 5.3).
pub const TRAILER_HEAD_SIZE: usize = 8 + NONCE_SIZE;
/// `TRAILER_RESIDUE`: what a trailer's padding makes `(C - HEADER_SIZE) mod FULL_SEGMENT_SIZE` (SPEC 5.3).
pub const TRAILER_RESIDUE: u64 = 1;
/// Key length of every key in the format (SPEC 3).
pub const KEY_SIZE: usize = 32;
/// Length of a key ID (SPEC 3).
pub const KEY_ID_SIZE: usize = 8;
/// Length of `KEY_CHECK` (SPEC 3).
pub const KEY_CHECK_SIZE: usize = 16;
/// Length of the header salt `S` (SPEC 5.1).
pub const SALT_SIZE: usize = 32;
/// AEAD nonce length (SPEC 4).
pub const NONCE_SIZE: usize = 12;

/// HKDF labels (SPEC 3, 5.3, 7, 9).
pub mod label {
    /// `KEY_CHECK` derivation.
    pub const KEY_CHECK: &[u8] = b"kura/v1/key-check";
    /// Wrap key derivation; bucket and key follow, length-prefixed.
    pub const WRAP: &[u8] = b"kura/v1/wrap";
    /// `COMMITMENT` expansion.
    pub const COMMIT: &[u8] = b"kura/v1/commit";
    /// Part key expansion; part number and part nonce follow.
    pub const PART: &[u8] = b"kura/v1/part";
    /// Trailer key expansion.
    pub const TRAILER: &[u8] = b"kura/v1/trailer";
    /// Metadata key expansion, also the start of the sealed metadata's associated data
    /// (the header copy follows).
    pub const METADATA: &[u8] = b"kura/v1/metadata";
    /// Associated data of a passphrase-sealed key file.
    pub const KEYFILE: &[u8] = b"kura/v1/keyfile";
}

// Header field offsets (SPEC 5.1 table).
pub(crate) const OFF_CIPHER: usize = 5;
pub(crate) const OFF_RESERVED: usize = 6;
pub(crate) const OFF_KEY_ID: usize = 8;
pub(crate) const OFF_PART_SIZE: usize = 16;
pub(crate) const OFF_SALT: usize = 24;
pub(crate) const OFF_KEY_CHECK: usize = 56;
pub(crate) const OFF_WRAP_NONCE: usize = 72;
pub(crate) const OFF_WRAPPED: usize = 84;
pub(crate) const OFF_COMMITMENT: usize = 132;

const _: () = assert!(OFF_COMMITMENT + KEY_SIZE == HEADER_SIZE);
const _: () = assert!(OFF_WRAPPED + KEY_SIZE + TAG_SIZE == OFF_COMMITMENT);

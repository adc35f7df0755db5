//! The error type of every fallible operation in this crate.

use crate::KeyId;

/// What went wrong while reading or writing a kura object or key file.
///
/// The variants match the `expect:` classes of the test vectors (SPEC 10) so that a test
/// can check the class of a failure, not just that something failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not a kura object, or break a structural rule of the format
    /// (bad magic, non-zero reserved bytes, impossible lengths or part numbers).
    #[error("malformed kura object: {0}")]
    Malformed(&'static str),
    /// The header names a format version this reader does not implement.
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u8),
    /// The header names a cipher this reader does not implement.
    #[error("unsupported cipher ID {0:#04x}")]
    UnsupportedCipher(u8),
    /// The header's key ID is not in the key file.
    #[error("key {0} is not in the key file")]
    UnknownKeyId(KeyId),
    /// The key file holds a different key under the header's key ID.
    #[error("key {0} in the key file is not the key this object was written with")]
    WrongKey(KeyId),
    /// The header fails authentication: it was altered, or the object is being read under a
    /// bucket or key other than the one it was written for.
    #[error(
        "object header failed authentication (tampered, or not written for this bucket and key)"
    )]
    TamperedHeader,
    /// A segment or the trailer fails authentication, or is not where it belongs.
    #[error("segment {index} of part {part} failed authentication")]
    TamperedSegment {
        /// Part number the reader expected.
        part: u32,
        /// Segment index within the part the reader expected.
        index: u64,
    },
    /// The body ends before its last segment (or before the bytes a range needs).
    #[error("object body is truncated")]
    Truncated,
    /// A requested plaintext range lies outside the object.
    #[error("range {start}-{end} is outside an object of {size} bytes")]
    RangeNotSatisfiable {
        /// First requested byte.
        start: u64,
        /// Last requested byte (inclusive).
        end: u64,
        /// Plaintext size of the object.
        size: u64,
    },
    /// A key file could not be read or parsed.
    #[error("key file: {0}")]
    KeyFile(String),
    /// The passphrase does not open a sealed key file (or the file was altered).
    #[error("wrong passphrase, or the sealed key file was altered")]
    WrongPassphrase,
    /// The operating system's random generator failed.
    #[error("system random number generator failed")]
    Random,
    /// Reading or writing the underlying byte stream failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The test-vector class of this error (SPEC 10), or `other` for errors no vector has.
    #[must_use]
    pub fn class(&self) -> &'static str {
        match self {
            Error::Malformed(_) => "malformed",
            Error::UnsupportedVersion(_) => "unsupported-version",
            Error::UnsupportedCipher(_) => "unsupported-cipher",
            Error::UnknownKeyId(_) => "unknown-key-id",
            Error::WrongKey(_) => "wrong-key",
            Error::TamperedHeader => "tampered-header",
            Error::TamperedSegment { .. } => "tampered-segment",
            Error::Truncated => "truncated",
            _ => "other",
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! kura's key management and object encryption format, version 1.
//!
//! `SPEC.md` beside this crate is the normative description of the bytes; the modules
//! follow its sections:
//!
//! - [`format`]: the constants of the spec, by their spec names.
//! - [`Keyring`], key files ([`keyring`], [`keyfile`]): key-encryption keys by ID (SPEC 3, 9).
//! - [`ObjectSecrets`], [`Header`] → [`VerifiedHeader`]: the envelope (SPEC 5.1). A
//!   [`PayloadKey`] exists only for a verified header or a writer holding the secrets.
//! - [`PartSealer`]: writes a part's segments (SPEC 5.2); [`BodyOpener`] walks a whole
//!   body; [`RangeOpener`] opens just the segments of a range (SPEC 6.2).
//! - [`Layout`], [`plaintext_size`]: sizes and locations (SPEC 6); [`trailer`] (SPEC 5.3).
//! - [`ObjectReader`]: random access to a body in a seekable source (offline recovery).
//!   [`RangeWriter`] keeps a range of a body that can only be walked.
//! - [`transform_stream`]: any of the above over an async stream of byte chunks.
//!
//! Every sealer and opener holds at most one segment (or one trailer) of state, so memory
//! does not grow with object size.

mod backend;
mod be;
pub mod cipher;
mod error;
pub mod format;
mod header;
mod kdf;
pub mod keyfile;
pub mod keyring;
pub mod layout;
mod metadata;
mod open;
mod output;
pub mod rand;
mod range;
mod reader;
mod seal;
pub mod secret;
mod segment;
mod stream;
pub mod trailer;
mod transform;

pub use backend::{AES_BACKEND_ENV, AesBackend};
pub use cipher::Cipher;
pub use error::{Error, Result};
pub use header::{
    Header, OBJECT_SECRETS_SIZE, ObjectName, ObjectSecrets, PayloadKey, VerifiedHeader,
};
pub use keyring::{KeyEntry, KeyId, Keyring};
pub use layout::{
    Layout, PartInfo, SegmentPos, SizeInfo, ciphertext_size, part_ciphertext_len, plaintext_size,
};
pub use metadata::SEALED_METADATA_NAME;
pub use open::BodyOpener;
pub use output::Output;
pub use range::{CiphertextRange, RangeOpener};
pub use reader::{ObjectReader, RangeWriter, pump};
pub use seal::PartSealer;
pub use segment::SegmentId;
pub use stream::transform_stream;
pub use transform::Transform;

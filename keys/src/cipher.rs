//! The two AEADs of SPEC 4, behind one type, on ring's implementations.
//!
//! ring is the backend because it reaches the throughput target on this machine class in a
//! default build (`NOTES.md` 6: about 4 GB/s per core for AES-256-GCM at 64 KiB segments,
//! where the `RustCrypto` crate `aes-gcm` needs target CPU features to get near it).

use ring::aead::{AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

use crate::format::{KEY_SIZE, NONCE_SIZE, TAG_SIZE};

/// A cipher ID from the header (SPEC 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Cipher {
    /// `0x01`, AES-256-GCM, the default.
    #[default]
    Aes256Gcm,
    /// `0x02`, ChaCha20-Poly1305.
    ChaCha20Poly1305,
}

impl Cipher {
    /// The byte that names this cipher in a header.
    #[must_use]
    pub fn id(self) -> u8 {
        match self {
            Cipher::Aes256Gcm => 0x01,
            Cipher::ChaCha20Poly1305 => 0x02,
        }
    }

    /// The cipher a header byte names, if this reader implements it.
    #[must_use]
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            0x01 => Some(Cipher::Aes256Gcm),
            0x02 => Some(Cipher::ChaCha20Poly1305),
            _ => None,
        }
    }

    /// The name used on command lines and in test vectors.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "aes-256-gcm",
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    /// Parses a name as printed by [`Cipher::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "aes-256-gcm" => Some(Cipher::Aes256Gcm),
            "chacha20-poly1305" => Some(Cipher::ChaCha20Poly1305),
            _ => None,
        }
    }

    fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            Cipher::Aes256Gcm => &AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
        }
    }
}

/// An AEAD key ready for use. ring keeps the expanded key schedule inside; the raw bytes
/// it was made from are zeroized by their owners.
#[derive(Clone)]
pub(crate) struct AeadKey {
    key: LessSafeKey,
}

/// The AEAD rejected a ciphertext; callers turn this into the error class that fits.
#[derive(Debug)]
pub(crate) struct AuthFailed;

impl AeadKey {
    pub(crate) fn new(cipher: Cipher, key: &[u8; KEY_SIZE]) -> Self {
        let unbound = UnboundKey::new(cipher.algorithm(), key)
            .expect("both ciphers take 32-byte keys, so this cannot fail");
        Self {
            key: LessSafeKey::new(unbound),
        }
    }

    /// Encrypts `in_out` in place and appends the tag.
    pub(crate) fn seal_append(
        &self,
        nonce: [u8; NONCE_SIZE],
        aad: &[u8],
        in_out: &mut Vec<u8>,
        start: usize,
    ) {
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut in_out[start..],
            )
            .expect("inputs are far below ring's length limits");
        in_out.extend_from_slice(tag.as_ref());
    }

    /// Decrypts `in_out` (ciphertext followed by its tag) in place and returns the plaintext.
    pub(crate) fn open<'a>(
        &self,
        nonce: [u8; NONCE_SIZE],
        aad: &[u8],
        in_out: &'a mut [u8],
    ) -> Result<&'a mut [u8], AuthFailed> {
        if in_out.len() < TAG_SIZE {
            return Err(AuthFailed);
        }
        self.key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out)
            .map_err(|_| AuthFailed)
    }
}

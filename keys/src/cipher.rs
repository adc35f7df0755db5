//! The two AEADs of SPEC 4, behind one type, on aws-lc-rs's implementations.
//!
//! aws-lc-rs is the backend because it is the fastest here in a default build: its AVX-512
//! AES-256-GCM sealed 64 KiB segments at 7.4-10 GB/s on one core where ring's AVX2 code did
//! 4.7-6 in the same runs (AEAD calls alone; keys/README.md has the format's figures), and
//! `RustCrypto`'s `aes-gcm` needs target CPU features to pass 1.2 GB/s. It is in the binary
//! already through rustls, and it seals and opens out of place, which saves the gateway a
//! copy of every byte it moves.

use aws_lc_rs::aead::{AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

use crate::Output;
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

    fn algorithm(self) -> &'static aws_lc_rs::aead::Algorithm {
        match self {
            Cipher::Aes256Gcm => &AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
        }
    }
}

/// An AEAD key ready for use. aws-lc-rs keeps the expanded key schedule inside; the raw bytes
/// it was made from are zeroized by their owners.
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
            .expect("inputs are far below the AEAD's length limits");
        in_out.extend_from_slice(tag.as_ref());
    }

    /// Encrypts `plaintext` into `out`, which must be `plaintext.len() + TAG_SIZE` long:
    /// ciphertext, then tag.
    pub(crate) fn seal_to(
        &self,
        nonce: [u8; NONCE_SIZE],
        aad: &[u8],
        plaintext: &[u8],
        out: &mut [u8],
    ) {
        let (ciphertext, tag) = out.split_at_mut(plaintext.len());
        self.key
            .seal_out_of_place_scatter(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                plaintext,
                ciphertext,
                &[],
                tag,
            )
            .expect("callers size `out` as plaintext plus tag, far below the length limits");
    }

    /// Decrypts `sealed` (ciphertext followed by its tag) where it lies and appends the
    /// plaintext to `out`; on failure `out` is left as it was.
    pub(crate) fn open_append(
        &self,
        nonce: [u8; NONCE_SIZE],
        aad: &[u8],
        sealed: &[u8],
        out: &mut Output,
    ) -> Result<(), AuthFailed> {
        let Some(split) = sealed.len().checked_sub(TAG_SIZE) else {
            return Err(AuthFailed);
        };
        let (ciphertext, tag) = sealed.split_at(split);
        self.key
            .open_separate_gather(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                ciphertext,
                tag,
                out.room(ciphertext.len()),
            )
            .map_err(|_| AuthFailed)?;
        // Only now does what the room holds become output: on failure it was never
        // authenticated, and stays outside the output.
        out.commit(ciphertext.len());
        Ok(())
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

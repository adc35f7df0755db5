//! The two AEADs of SPEC 4, behind one type.
//!
//! AES-256-GCM runs on aws-lc-rs or ring, whichever is faster on this CPU
//! (`crate::backend`); ChaCha20-Poly1305 on aws-lc-rs. aws-lc-rs seals and opens out of
//! place, which saves a copy of every byte the gateway moves; ring needs the input copied
//! into the output first, and still wins where its VAES-AVX2 code runs and aws-lc's AVX-512
//! code cannot. `RustCrypto`'s `aes-gcm` needs target CPU features to pass 1.2 GB/s.

use aws_lc_rs::aead::{AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

use crate::Output;
use crate::backend::AesBackend;
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

/// An AEAD key ready for use, on the backend chosen for its cipher. Both hold the expanded
/// key schedule and wipe it when dropped; the raw bytes it was made from are zeroized by
/// their owners.
pub(crate) enum AeadKey {
    /// aws-lc frees its schedule with `OPENSSL_free`, which zeroes the memory.
    AwsLc(LessSafeKey),
    Ring(RingKey),
}

/// ring's AES-256-GCM key, boxed because ring keeps its 544-byte key schedule inline (and
/// aws-lc-rs behind a pointer). ring does not wipe the schedule when it is dropped, and
/// safe Rust cannot zero another crate's private fields, so dropping this overwrites the
/// schedule where it lies with the all-zero key's. (Copies a move left on the stack while
/// the key was built are not reached; the same holds for every zeroizing type.)
pub(crate) struct RingKey(Box<ring::aead::LessSafeKey>);

impl RingKey {
    fn new(key: &[u8; KEY_SIZE]) -> Self {
        Self(Box::new(Self::schedule(key)))
    }

    fn schedule(key: &[u8; KEY_SIZE]) -> ring::aead::LessSafeKey {
        ring::aead::LessSafeKey::new(
            ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key)
                .expect("AES-256-GCM takes 32-byte keys, so this cannot fail"),
        )
    }
}

impl Drop for RingKey {
    fn drop(&mut self) {
        *self.0 = Self::schedule(&[0; KEY_SIZE]);
        // The box is freed next: without this the store above is dead and may be removed.
        std::hint::black_box(&*self.0);
    }
}

/// The AEAD rejected a ciphertext; callers turn this into the error class that fits.
#[derive(Debug)]
pub(crate) struct AuthFailed;

impl AeadKey {
    pub(crate) fn new(cipher: Cipher, key: &[u8; KEY_SIZE]) -> Self {
        Self::on(AesBackend::active(), cipher, key)
    }

    /// A key on `backend` if it runs `cipher` (ring runs only AES-256-GCM here).
    pub(crate) fn on(backend: AesBackend, cipher: Cipher, key: &[u8; KEY_SIZE]) -> Self {
        match (backend, cipher) {
            (AesBackend::Ring, Cipher::Aes256Gcm) => Self::Ring(RingKey::new(key)),
            _ => Self::AwsLc(LessSafeKey::new(
                UnboundKey::new(cipher.algorithm(), key)
                    .expect("both ciphers take 32-byte keys, so this cannot fail"),
            )),
        }
    }

    /// Encrypts `in_out[start..]` in place and appends the tag.
    pub(crate) fn seal_append(
        &self,
        nonce: [u8; NONCE_SIZE],
        aad: &[u8],
        in_out: &mut Vec<u8>,
        start: usize,
    ) {
        let tag = self.seal_in_place(nonce, aad, &mut in_out[start..]);
        in_out.extend_from_slice(&tag);
    }

    /// Encrypts `in_out` in place and returns the tag.
    fn seal_in_place(
        &self,
        nonce: [u8; NONCE_SIZE],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> [u8; TAG_SIZE] {
        const LIMITS: &str = "inputs are far below the AEAD's length limits";
        let mut tag_out = [0; TAG_SIZE];
        match self {
            Self::AwsLc(key) => {
                let tag = key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        in_out,
                    )
                    .expect(LIMITS);
                tag_out.copy_from_slice(tag.as_ref());
            }
            Self::Ring(RingKey(key)) => {
                let tag = key
                    .seal_in_place_separate_tag(
                        ring::aead::Nonce::assume_unique_for_key(nonce),
                        ring::aead::Aad::from(aad),
                        in_out,
                    )
                    .expect(LIMITS);
                tag_out.copy_from_slice(tag.as_ref());
            }
        }
        tag_out
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
        match self {
            Self::AwsLc(key) => key
                .seal_out_of_place_scatter(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    plaintext,
                    ciphertext,
                    &[],
                    tag,
                )
                .expect("callers size `out` as plaintext plus tag, far below the length limits"),
            // ring seals only in place: the copy is the price of its faster AES-GCM, and
            // leaves the segment in cache for the AEAD that follows.
            Self::Ring(_) => {
                ciphertext.copy_from_slice(plaintext);
                tag.copy_from_slice(&self.seal_in_place(nonce, aad, ciphertext));
            }
        }
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
        let room = out.room(ciphertext.len());
        match self {
            Self::AwsLc(key) => key
                .open_separate_gather(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    ciphertext,
                    tag,
                    room,
                )
                .map_err(|_| AuthFailed)?,
            Self::Ring(RingKey(key)) => {
                room.copy_from_slice(ciphertext);
                let tag = ring::aead::Tag::try_from(tag).map_err(|_| AuthFailed)?;
                key.open_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(nonce),
                    ring::aead::Aad::from(aad),
                    tag,
                    room,
                    0..,
                )
                .map_err(|_| AuthFailed)?;
            }
        }
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
        match self {
            Self::AwsLc(key) => key
                .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out)
                .map_err(|_| AuthFailed),
            Self::Ring(RingKey(key)) => key
                .open_in_place(
                    ring::aead::Nonce::assume_unique_for_key(nonce),
                    ring::aead::Aad::from(aad),
                    in_out,
                )
                .map_err(|_| AuthFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AeadKey, AesBackend, Cipher};
    use crate::Output;
    use crate::format::TAG_SIZE;

    const BACKENDS: [AesBackend; 2] = [AesBackend::AwsLc, AesBackend::Ring];

    fn sealed_by(backend: AesBackend, plaintext: &[u8]) -> Vec<u8> {
        let mut out = vec![0; plaintext.len() + TAG_SIZE];
        AeadKey::on(backend, Cipher::Aes256Gcm, &[9; 32])
            .seal_to([3; 12], b"aad", plaintext, &mut out);
        out
    }

    #[test]
    fn aes_backends_seal_the_same_bytes() {
        let plaintext: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let a = sealed_by(AesBackend::AwsLc, &plaintext);
        assert_eq!(a, sealed_by(AesBackend::Ring, &plaintext));
        assert_ne!(&a[..plaintext.len()], &plaintext[..]);
        let mut in_place = plaintext.clone();
        for backend in BACKENDS {
            let key = AeadKey::on(backend, Cipher::Aes256Gcm, &[9; 32]);
            in_place.truncate(plaintext.len());
            in_place.copy_from_slice(&plaintext);
            key.seal_append([3; 12], b"aad", &mut in_place, 0);
            assert_eq!(in_place, a, "{backend:?} in place");
        }
    }

    #[test]
    fn each_aes_backend_opens_the_others_output_and_rejects_tampering() {
        let plaintext = b"a segment's worth of plaintext".repeat(1000);
        for sealer in BACKENDS {
            let sealed = sealed_by(sealer, &plaintext);
            for opener in BACKENDS {
                let key = AeadKey::on(opener, Cipher::Aes256Gcm, &[9; 32]);
                let mut out = Output::new();
                key.open_append([3; 12], b"aad", &sealed, &mut out).unwrap();
                assert_eq!(&out[..], &plaintext[..], "{sealer:?} -> {opener:?}");
                let mut copy = sealed.clone();
                assert_eq!(
                    key.open([3; 12], b"aad", &mut copy).unwrap(),
                    &plaintext[..]
                );

                for at in [0, plaintext.len() / 2, sealed.len() - 1] {
                    let mut bad = sealed.clone();
                    bad[at] ^= 1;
                    let mut out = Output::new();
                    assert!(key.open_append([3; 12], b"aad", &bad, &mut out).is_err());
                    assert!(out.is_empty(), "nothing unauthenticated becomes output");
                    assert!(key.open([3; 12], b"aad", &mut bad).is_err());
                }
                let mut out = Output::new();
                assert!(key.open_append([3; 12], b"aaD", &sealed, &mut out).is_err());
                assert!(
                    key.open_append([3; 12], b"aad", &sealed[..TAG_SIZE - 1], &mut out)
                        .is_err()
                );
            }
        }
    }

    #[test]
    fn ring_is_never_used_for_chacha() {
        let key = AeadKey::on(AesBackend::Ring, Cipher::ChaCha20Poly1305, &[9; 32]);
        assert!(matches!(key, AeadKey::AwsLc(_)));
    }
}

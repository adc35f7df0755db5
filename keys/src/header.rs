//! The object header (SPEC 5.1): creating it, parsing it, and verifying it in the order the
//! spec requires. A payload key exists only inside a [`VerifiedHeader`], so no code path can
//! decrypt a segment before the header has authenticated.

use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::cipher::{AeadKey, Cipher};
use crate::format::{
    HEADER_SIZE, KEY_SIZE, MAGIC, NONCE_SIZE, OFF_CIPHER, OFF_COMMITMENT, OFF_KEY_CHECK,
    OFF_KEY_ID, OFF_PART_SIZE, OFF_RESERVED, OFF_SALT, OFF_WRAP_NONCE, OFF_WRAPPED,
    PART_NONCE_SIZE, SALT_SIZE, VERSION,
};
use crate::kdf;
use crate::keyring::{KeyId, Keyring};
use crate::secret::DataKey;
use crate::{Error, Result};

/// The bucket and key an object is written under; the wrapped data key is bound to them.
#[derive(Clone, Copy, Debug)]
pub struct ObjectName<'a> {
    pub(crate) bucket: &'a str,
    pub(crate) key: &'a str,
}

impl<'a> ObjectName<'a> {
    /// Names an object.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the bucket or key is longer than 65535 bytes (S3 allows
    /// 63 and 1024).
    pub fn new(bucket: &'a str, key: &'a str) -> Result<Self> {
        if bucket.len() > usize::from(u16::MAX) || key.len() > usize::from(u16::MAX) {
            return Err(Error::Malformed(
                "bucket or object key longer than 65535 bytes",
            ));
        }
        Ok(Self { bucket, key })
    }
}

/// What one object's keys come from: its data key and its salt. Both stay the same for the
/// object's life; a multipart upload shares them between the writers of its parts.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct ObjectSecrets {
    dk: DataKey,
    salt: [u8; SALT_SIZE],
}

/// Length of [`ObjectSecrets::to_bytes`].
pub const OBJECT_SECRETS_SIZE: usize = KEY_SIZE + SALT_SIZE;

impl ObjectSecrets {
    /// Fresh random secrets for a new object.
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn generate() -> Result<Self> {
        let mut salt = [0u8; SALT_SIZE];
        crate::rand::fill(&mut salt)?;
        Ok(Self {
            dk: DataKey::generate()?,
            salt,
        })
    }

    /// Rebuilds secrets from [`ObjectSecrets::to_bytes`] (the gateway carries them, sealed,
    /// from `CreateMultipartUpload` to each `UploadPart`).
    #[must_use]
    pub fn from_bytes(bytes: &[u8; OBJECT_SECRETS_SIZE]) -> Self {
        let mut dk = [0u8; KEY_SIZE];
        dk.copy_from_slice(&bytes[..KEY_SIZE]);
        let mut salt = [0u8; SALT_SIZE];
        salt.copy_from_slice(&bytes[KEY_SIZE..]);
        let out = Self {
            dk: DataKey::from_bytes(dk),
            salt,
        };
        dk.zeroize();
        out
    }

    /// The secrets as bytes, for sealing elsewhere.
    #[must_use]
    pub fn to_bytes(&self) -> zeroize::Zeroizing<[u8; OBJECT_SECRETS_SIZE]> {
        let mut out = zeroize::Zeroizing::new([0u8; OBJECT_SECRETS_SIZE]);
        out[..KEY_SIZE].copy_from_slice(self.dk.expose());
        out[KEY_SIZE..].copy_from_slice(&self.salt);
        out
    }

    /// The keys that seal and open this object's parts and trailer.
    #[must_use]
    pub fn payload_key(&self, cipher: Cipher) -> PayloadKey {
        PayloadKey::new(cipher, kdf::DataPrk::extract(&self.dk, &self.salt))
    }

    pub(crate) fn metadata_key(&self, cipher: Cipher) -> AeadKey {
        AeadKey::new(
            cipher,
            &kdf::DataPrk::extract(&self.dk, &self.salt).metadata_key(),
        )
    }

    /// `COMMITMENT` of these secrets (SPEC 3): equal for every header of one object.
    #[must_use]
    pub fn commitment(&self) -> [u8; KEY_SIZE] {
        kdf::DataPrk::extract(&self.dk, &self.salt).commitment()
    }

    /// Writes the header of an object with these secrets, wrapped under the keyring's
    /// active key and bound to `name`. `part_size` is `P` of SPEC 6.2 (0 if unknown).
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn header(
        &self,
        keyring: &Keyring,
        name: &ObjectName<'_>,
        cipher: Cipher,
        part_size: u64,
    ) -> Result<[u8; HEADER_SIZE]> {
        let mut nonce = [0u8; NONCE_SIZE];
        crate::rand::fill(&mut nonce)?;
        Ok(self.header_with_nonce(keyring, name, cipher, part_size, nonce))
    }

    /// [`ObjectSecrets::header`] with a chosen wrap nonce, for reproducible test vectors only.
    #[cfg(feature = "vectors")]
    #[doc(hidden)]
    #[must_use]
    pub fn header_for_vectors(
        &self,
        keyring: &Keyring,
        name: &ObjectName<'_>,
        cipher: Cipher,
        part_size: u64,
        nonce: [u8; NONCE_SIZE],
    ) -> [u8; HEADER_SIZE] {
        self.header_with_nonce(keyring, name, cipher, part_size, nonce)
    }

    fn header_with_nonce(
        &self,
        keyring: &Keyring,
        name: &ObjectName<'_>,
        cipher: Cipher,
        part_size: u64,
        nonce: [u8; NONCE_SIZE],
    ) -> [u8; HEADER_SIZE] {
        let kek = keyring.active();
        let mut h = [0u8; HEADER_SIZE];
        h[..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[OFF_CIPHER] = cipher.id();
        h[OFF_KEY_ID..OFF_PART_SIZE].copy_from_slice(&kek.id.to_bytes());
        h[OFF_PART_SIZE..OFF_SALT].copy_from_slice(&part_size.to_be_bytes());
        h[OFF_SALT..OFF_KEY_CHECK].copy_from_slice(&self.salt);
        h[OFF_KEY_CHECK..OFF_WRAP_NONCE].copy_from_slice(kek.key_check());
        h[OFF_WRAP_NONCE..OFF_WRAPPED].copy_from_slice(&nonce);
        let wrap = AeadKey::new(cipher, &kdf::wrap_key(kek.kek(), &self.salt, name));
        let mut sealed =
            zeroize::Zeroizing::new(Vec::with_capacity(KEY_SIZE + crate::format::TAG_SIZE));
        sealed.extend_from_slice(self.dk.expose());
        wrap.seal_append(nonce, &h[..OFF_WRAPPED], &mut sealed, 0);
        h[OFF_WRAPPED..OFF_COMMITMENT].copy_from_slice(&sealed);
        h[OFF_COMMITMENT..].copy_from_slice(&self.commitment());
        h
    }
}

/// A header that has passed the structural checks (SPEC 5.1 steps 1 to 3) but not yet
/// authenticated.
#[derive(Clone)]
pub struct Header {
    bytes: [u8; HEADER_SIZE],
    cipher: Cipher,
}

impl Header {
    /// Parses the first bytes of a body. `bytes` may be longer than the header.
    ///
    /// # Errors
    /// `Malformed`, `UnsupportedVersion`, `UnsupportedCipher` or `Truncated`, in the order of
    /// SPEC 5.1.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let n = bytes.len().min(MAGIC.len());
        if bytes[..n] != MAGIC[..n] {
            return Err(Error::Malformed("not a kura object (bad magic)"));
        }
        let version = *bytes.get(MAGIC.len()).ok_or(Error::Truncated)?;
        if version != VERSION {
            return Err(Error::UnsupportedVersion(version));
        }
        let id = *bytes.get(OFF_CIPHER).ok_or(Error::Truncated)?;
        let cipher = Cipher::from_id(id).ok_or(Error::UnsupportedCipher(id))?;
        let bytes: [u8; HEADER_SIZE] =
            *bytes.first_chunk::<HEADER_SIZE>().ok_or(Error::Truncated)?;
        if bytes[OFF_RESERVED..OFF_KEY_ID] != [0, 0] {
            return Err(Error::Malformed("reserved header bytes are not zero"));
        }
        Ok(Self { bytes, cipher })
    }

    /// The cipher of this object.
    #[must_use]
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// The ID of the key that wraps this object's data key.
    #[must_use]
    pub fn key_id(&self) -> KeyId {
        KeyId(u64::from_be_bytes(crate::be::array_at(
            &self.bytes,
            OFF_KEY_ID,
        )))
    }

    /// `P` of SPEC 6.2 (unauthenticated until verified).
    #[must_use]
    pub fn part_size(&self) -> u64 {
        u64::from_be_bytes(crate::be::array_at(&self.bytes, OFF_PART_SIZE))
    }

    /// The raw header bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; HEADER_SIZE] {
        &self.bytes
    }

    /// Authenticates the header for `name` with a key from `keyring` (SPEC 5.1 steps 4 to 6).
    ///
    /// # Errors
    /// `UnknownKeyId`, `WrongKey` or `TamperedHeader`.
    pub fn verify(self, keyring: &Keyring, name: &ObjectName<'_>) -> Result<VerifiedHeader> {
        let id = self.key_id();
        let entry = keyring.get(id).ok_or(Error::UnknownKeyId(id))?;
        if !bool::from(
            entry
                .key_check()
                .ct_eq(&self.bytes[OFF_KEY_CHECK..OFF_WRAP_NONCE]),
        ) {
            return Err(Error::WrongKey(id));
        }
        let salt: [u8; SALT_SIZE] = crate::be::array_at(&self.bytes, OFF_SALT);
        let nonce: [u8; NONCE_SIZE] = crate::be::array_at(&self.bytes, OFF_WRAP_NONCE);
        let wrap = AeadKey::new(self.cipher, &kdf::wrap_key(entry.kek(), &salt, name));
        let mut wrapped = zeroize::Zeroizing::new(self.bytes[OFF_WRAPPED..OFF_COMMITMENT].to_vec());
        let dk = wrap
            .open(nonce, &self.bytes[..OFF_WRAPPED], &mut wrapped)
            .map_err(|_| Error::TamperedHeader)?;
        let dk: [u8; KEY_SIZE] = (&*dk).try_into().map_err(|_| Error::TamperedHeader)?;
        let secrets = ObjectSecrets {
            dk: DataKey::from_bytes(dk),
            salt,
        };
        // SPEC 5.1 step 6 comes before any other key is derived from the DK.
        let prk = kdf::DataPrk::extract(&secrets.dk, &secrets.salt);
        if !bool::from(prk.commitment().ct_eq(&self.bytes[OFF_COMMITMENT..])) {
            return Err(Error::TamperedHeader);
        }
        let payload = PayloadKey::new(self.cipher, prk);
        Ok(VerifiedHeader {
            header: self,
            secrets,
            payload,
        })
    }
}

/// A header that authenticated, with the keys it unlocks. No `Debug`: it holds secrets.
pub struct VerifiedHeader {
    header: Header,
    secrets: ObjectSecrets,
    payload: PayloadKey,
}

impl VerifiedHeader {
    /// The verified header.
    #[must_use]
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The key for this object's segments and trailer.
    #[must_use]
    pub fn payload_key(&self) -> &PayloadKey {
        &self.payload
    }

    /// Gives up everything but the payload key (for readers that only decrypt segments).
    #[must_use]
    pub fn into_payload_key(self) -> PayloadKey {
        self.payload
    }

    /// The object's secrets, for sealing metadata or further parts.
    #[must_use]
    pub fn secrets(&self) -> &ObjectSecrets {
        &self.secrets
    }

    /// A new header for the same body under another name and/or the keyring's active key
    /// (copy, rename, rotation; SPEC 5.1). Every byte after the header stays valid.
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn rewrap(&self, keyring: &Keyring, name: &ObjectName<'_>) -> Result<[u8; HEADER_SIZE]> {
        self.secrets
            .header(keyring, name, self.header.cipher, self.header.part_size())
    }
}

/// The keys of an object's parts and trailer. Exists only for a verified header or for a
/// writer holding the object's secrets.
pub struct PayloadKey {
    pub(crate) cipher: Cipher,
    prk: kdf::DataPrk,
    trailer: AeadKey,
}

impl PayloadKey {
    fn new(cipher: Cipher, prk: kdf::DataPrk) -> Self {
        let trailer = AeadKey::new(cipher, &prk.trailer_key());
        Self {
            cipher,
            prk,
            trailer,
        }
    }

    /// A second handle on the same keys, for a second reader of the same object.
    pub(crate) fn duplicate(&self) -> Self {
        Self::new(self.cipher, self.prk.duplicate())
    }

    /// The key of one upload of one part (SPEC 3).
    pub(crate) fn part_key(&self, part: u32, nonce: [u8; PART_NONCE_SIZE]) -> AeadKey {
        AeadKey::new(self.cipher, &self.prk.part_key(part, nonce))
    }

    pub(crate) fn trailer_key(&self) -> &AeadKey {
        &self.trailer
    }

    /// The cipher these keys are for.
    #[must_use]
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }
}

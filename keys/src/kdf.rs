//! The HKDF-SHA-256 derivations of SPEC 3, one function per derived value.

use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Prk, Salt};
use zeroize::Zeroizing;

use crate::format::{KEY_CHECK_SIZE, KEY_SIZE, PART_NONCE_SIZE, SALT_SIZE, label};
use crate::secret::{DataKey, Kek};

struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn expand<const N: usize>(prk: &Prk, info: &[&[u8]]) -> Zeroizing<[u8; N]> {
    let mut out = Zeroizing::new([0u8; N]);
    prk.expand(info, Len(N))
        .and_then(|okm| okm.fill(out.as_mut()))
        .expect("output lengths are far below HKDF's 255 * 32 byte limit");
    out
}

/// `KEY_CHECK = HKDF(salt = "", ikm = KEK, info = "kura/v1/key-check", 16)`.
pub(crate) fn key_check(kek: &Kek) -> [u8; KEY_CHECK_SIZE] {
    let prk = Salt::new(HKDF_SHA256, &[]).extract(kek.expose());
    *expand::<KEY_CHECK_SIZE>(&prk, &[label::KEY_CHECK])
}

/// The wrap key, bound to the object's bucket and key.
pub(crate) fn wrap_key(
    kek: &Kek,
    salt: &[u8; SALT_SIZE],
    name: &crate::ObjectName<'_>,
) -> Zeroizing<[u8; KEY_SIZE]> {
    let prk = Salt::new(HKDF_SHA256, salt).extract(kek.expose());
    let bucket = name.bucket.as_bytes();
    let key = name.key.as_bytes();
    // ObjectName::new keeps both under 65536 bytes.
    let bucket_len = u16::try_from(bucket.len())
        .unwrap_or(u16::MAX)
        .to_be_bytes();
    let key_len = u16::try_from(key.len()).unwrap_or(u16::MAX).to_be_bytes();
    expand::<KEY_SIZE>(&prk, &[label::WRAP, &bucket_len, bucket, &key_len, key])
}

/// `PRK = HKDF-Extract(salt = S, ikm = DK)`, kept as bytes so it can be zeroized; every
/// expansion rebuilds ring's `Prk` from them.
pub(crate) struct DataPrk(Zeroizing<[u8; KEY_SIZE]>);

impl DataPrk {
    pub(crate) fn extract(dk: &DataKey, salt: &[u8; SALT_SIZE]) -> Self {
        let tag = aws_lc_rs::hmac::sign(
            &aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, salt),
            dk.expose(),
        );
        let mut bytes = Zeroizing::new([0u8; KEY_SIZE]);
        bytes.copy_from_slice(tag.as_ref());
        Self(bytes)
    }

    fn prk(&self) -> Prk {
        Prk::new_less_safe(HKDF_SHA256, self.0.as_ref())
    }

    pub(crate) fn commitment(&self) -> [u8; KEY_SIZE] {
        *expand::<KEY_SIZE>(&self.prk(), &[label::COMMIT])
    }

    pub(crate) fn part_key(
        &self,
        part: u32,
        nonce: [u8; PART_NONCE_SIZE],
    ) -> Zeroizing<[u8; KEY_SIZE]> {
        expand::<KEY_SIZE>(&self.prk(), &[label::PART, &part.to_be_bytes(), &nonce])
    }

    pub(crate) fn trailer_key(&self) -> Zeroizing<[u8; KEY_SIZE]> {
        expand::<KEY_SIZE>(&self.prk(), &[label::TRAILER])
    }

    pub(crate) fn metadata_key(&self) -> Zeroizing<[u8; KEY_SIZE]> {
        expand::<KEY_SIZE>(&self.prk(), &[label::METADATA])
    }

    pub(crate) fn duplicate(&self) -> Self {
        Self(self.0.clone())
    }
}

//! The HKDF-SHA-256 derivations of SPEC 3, one function per derived value.

use ring::hkdf::{HKDF_SHA256, KeyType, Prk, Salt};
use zeroize::Zeroizing;

use crate::format::{KEY_CHECK_SIZE, KEY_SIZE, SALT_SIZE, label};
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
    let bucket_len = u16::try_from(bucket.len())
        .unwrap_or(u16::MAX)
        .to_be_bytes();
    let key_len = u16::try_from(key.len()).unwrap_or(u16::MAX).to_be_bytes();
    expand::<KEY_SIZE>(&prk, &[label::WRAP, &bucket_len, bucket, &key_len, key])
}

/// The keys that come from a data key: commitment, payload key and metadata key.
pub(crate) struct DataKeyDerived {
    pub(crate) commitment: [u8; KEY_SIZE],
    pub(crate) payload: Zeroizing<[u8; KEY_SIZE]>,
    pub(crate) metadata: Zeroizing<[u8; KEY_SIZE]>,
}

pub(crate) fn from_data_key(dk: &DataKey, salt: &[u8; SALT_SIZE]) -> DataKeyDerived {
    let prk = Salt::new(HKDF_SHA256, salt).extract(dk.expose());
    DataKeyDerived {
        commitment: *expand::<KEY_SIZE>(&prk, &[label::COMMIT]),
        payload: expand::<KEY_SIZE>(&prk, &[label::PAYLOAD]),
        metadata: expand::<KEY_SIZE>(&prk, &[label::METADATA]),
    }
}

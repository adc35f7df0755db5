//! IDs (FORMAT.md section 3): keyed BLAKE3 over content, and the key they are keyed with.

use std::fmt;

use zeroize::Zeroizing;

use crate::error::{RepoError, Result};

/// `ID_SIZE`: bytes in an ID.
pub const ID_SIZE: usize = 32;

/// The ID of a blob, pack, index or snapshot.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub [u8; ID_SIZE]);

impl Id {
    /// Lower-case hex, as in object names and JSON.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits.
    ///
    /// # Errors
    /// When `s` is not 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self> {
        let mut out = [0u8; ID_SIZE];
        hex::decode_to_slice(s, &mut out)
            .map_err(|e| RepoError::corrupt("ID", format!("{s:?}: {e}")))?;
        Ok(Self(out))
    }

    /// The first eight hex digits, for people.
    #[must_use]
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.short())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl serde::Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Id::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

/// `ID_KEY`: the per-repository key of the keyed hash. No Debug, no equality; zeroed on drop.
pub struct IdKey(Zeroizing<[u8; ID_SIZE]>);

impl IdKey {
    /// A fresh random key.
    ///
    /// # Errors
    /// When the system's random source fails.
    pub fn generate() -> Result<Self> {
        let mut k = Zeroizing::new([0u8; ID_SIZE]);
        kura_keys::rand::fill(k.as_mut()).map_err(|_| RepoError::Random)?;
        Ok(Self(k))
    }

    pub(crate) fn from_hex(s: &str) -> Result<Self> {
        let mut k = Zeroizing::new([0u8; ID_SIZE]);
        hex::decode_to_slice(s, k.as_mut())
            .map_err(|e| RepoError::corrupt("config", format!("id_key: {e}")))?;
        Ok(Self(k))
    }

    pub(crate) fn to_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(hex::encode(self.0.as_ref()))
    }

    /// The ID of `data` in this repository.
    #[must_use]
    pub fn id(&self, data: &[u8]) -> Id {
        Id(*blake3::keyed_hash(&self.0, data).as_bytes())
    }
}

//! A keyring: the key-encryption keys an operator holds, by key ID, with one active for
//! new writes (SPEC 3, 9).

use std::fmt;

use crate::format::{KEY_CHECK_SIZE, KEY_ID_SIZE};
use crate::kdf;
use crate::secret::Kek;
use crate::{Error, Result};

/// Names a key-encryption key; printed as 16 lower-case hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub u64);

impl KeyId {
    /// Draws a random key ID.
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn generate() -> Result<Self> {
        Ok(Self(crate::rand::u64()?))
    }

    /// The 8 bytes that name this key in a header.
    #[must_use]
    pub fn to_bytes(self) -> [u8; KEY_ID_SIZE] {
        self.0.to_be_bytes()
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for KeyId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s.len() != 16 {
            return Err(Error::KeyFile(format!("key ID {s:?} is not 16 hex digits")));
        }
        u64::from_str_radix(s, 16)
            .map(KeyId)
            .map_err(|_| Error::KeyFile(format!("key ID {s:?} is not 16 hex digits")))
    }
}

/// One key-encryption key with its ID and when it was made.
pub struct KeyEntry {
    /// The key's ID.
    pub id: KeyId,
    /// When the key was generated (RFC 3339, informational only).
    pub created: String,
    kek: Kek,
    check: [u8; KEY_CHECK_SIZE],
}

impl KeyEntry {
    /// Pairs a key with its ID.
    #[must_use]
    pub fn new(id: KeyId, created: String, kek: Kek) -> Self {
        let check = kdf::key_check(&kek);
        Self {
            id,
            created,
            kek,
            check,
        }
    }

    /// The key's `KEY_CHECK` (SPEC 3): safe to show, it reveals nothing about the key.
    #[must_use]
    pub fn key_check(&self) -> &[u8; KEY_CHECK_SIZE] {
        &self.check
    }

    pub(crate) fn kek(&self) -> &Kek {
        &self.kek
    }
}

/// The keys an operator holds. No `Debug`: it holds secrets.
pub struct Keyring {
    keys: Vec<KeyEntry>,
    /// Index of the active key in `keys`.
    active: usize,
}

impl Keyring {
    /// A keyring with one new random key, active.
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn generate(created: String) -> Result<Self> {
        let entry = KeyEntry::new(KeyId::generate()?, created, Kek::generate()?);
        Ok(Self {
            keys: vec![entry],
            active: 0,
        })
    }

    /// Builds a keyring from entries; `active` must name one of them.
    ///
    /// # Errors
    /// [`Error::KeyFile`] when `active` is missing or an ID appears twice.
    pub fn new(keys: Vec<KeyEntry>, active: KeyId) -> Result<Self> {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.id == k.id) {
                return Err(Error::KeyFile(format!("key {} appears twice", k.id)));
            }
        }
        let Some(active) = keys.iter().position(|k| k.id == active) else {
            return Err(Error::KeyFile(format!(
                "active key {active} is not in the key file"
            )));
        };
        Ok(Self { keys, active })
    }

    /// Adds a new random key and makes it the active one (rotation).
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn rotate(&mut self, created: String) -> Result<KeyId> {
        let id = self.add(created)?;
        self.activate(id)?;
        Ok(id)
    }

    /// Adds a new random key, leaving the active one as it is: the first step of a
    /// rotation across several gateways, each of which can then read what the others
    /// seal under the new key once [`Keyring::activate`] makes it active.
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn add(&mut self, created: String) -> Result<KeyId> {
        let mut id = KeyId::generate()?;
        while self.get(id).is_some() {
            id = KeyId::generate()?;
        }
        self.keys.push(KeyEntry::new(id, created, Kek::generate()?));
        Ok(id)
    }

    /// Makes the held key `id` the one new objects are written with.
    ///
    /// # Errors
    /// [`Error::KeyFile`] when no key of this ID is held.
    pub fn activate(&mut self, id: KeyId) -> Result<()> {
        let at = self
            .keys
            .iter()
            .position(|k| k.id == id)
            .ok_or_else(|| Error::KeyFile(format!("no key {id} in the key file")))?;
        self.active = at;
        Ok(())
    }

    /// The key new objects are written with.
    #[must_use]
    pub fn active(&self) -> &KeyEntry {
        &self.keys[self.active]
    }

    /// The key with this ID, if held.
    #[must_use]
    pub fn get(&self, id: KeyId) -> Option<&KeyEntry> {
        self.keys.iter().find(|k| k.id == id)
    }

    /// Every key, in the order of the key file.
    pub fn entries(&self) -> impl Iterator<Item = &KeyEntry> {
        self.keys.iter()
    }
}

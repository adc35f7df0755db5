//! Zeroizing newtypes for every secret in the format.
//!
//! None of them implements `Debug`, `Display`, `PartialEq` or `Clone`: a secret cannot be
//! logged or compared by accident, and it is wiped from memory when dropped.

use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::format::KEY_SIZE;

macro_rules! secret_key {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Zeroize, ZeroizeOnDrop)]
        pub struct $name([u8; KEY_SIZE]);

        impl $name {
            /// Wraps raw key bytes.
            #[must_use]
            pub fn from_bytes(bytes: [u8; KEY_SIZE]) -> Self {
                Self(bytes)
            }

            /// The raw key bytes; keep the borrow short.
            #[must_use]
            pub fn expose(&self) -> &[u8; KEY_SIZE] {
                &self.0
            }
        }
    };
}

secret_key!(
    /// A key-encryption key ("master key") from the key file (SPEC 3).
    Kek
);
secret_key!(
    /// A per-object data key (SPEC 3).
    DataKey
);

impl DataKey {
    /// Draws a fresh random data key.
    ///
    /// # Errors
    /// [`crate::Error::Random`] if the system generator fails.
    pub fn generate() -> crate::Result<Self> {
        let mut bytes = [0u8; KEY_SIZE];
        crate::rand::fill(&mut bytes)?;
        Ok(Self(bytes))
    }
}

impl Kek {
    /// Draws a fresh random key-encryption key.
    ///
    /// # Errors
    /// [`crate::Error::Random`] if the system generator fails.
    pub fn generate() -> crate::Result<Self> {
        let mut bytes = [0u8; KEY_SIZE];
        crate::rand::fill(&mut bytes)?;
        Ok(Self(bytes))
    }
}

/// A passphrase for a sealed key file.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct Passphrase(String);

impl Passphrase {
    /// Wraps a passphrase.
    #[must_use]
    pub fn new(passphrase: String) -> Self {
        Self(passphrase)
    }

    pub(crate) fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// A credential secret (an S3 secret access key) read from a config file, a file or the
/// environment. Unlike the format's keys it may be cloned (configs are), but it still has
/// no `Debug` or `Display`: a struct that holds one writes its own `Debug` without it.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: String) -> Self {
        Self(secret)
    }

    /// The secret itself, to sign with; keep the borrow short.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is the empty string.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Self {
        Self(secret)
    }
}

impl From<&str> for Secret {
    fn from(secret: &str) -> Self {
        Self(secret.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self)
    }
}

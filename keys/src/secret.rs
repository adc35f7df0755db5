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

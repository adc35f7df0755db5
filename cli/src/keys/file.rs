//! Loading and saving key files, with the passphrase from the environment or the terminal.

use std::io::IsTerminal as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use kura_keys::Keyring;
use kura_keys::keyfile::Existing;
use kura_keys::secret::Passphrase;

const PASSPHRASE_ENV: &str = "KURA_KEY_PASSPHRASE";

/// A loaded key file, with the passphrase that sealed it (to seal it again on save).
pub struct Loaded {
    pub keyring: Keyring,
    pub passphrase: Option<Passphrase>,
}

pub fn passphrase(confirm: bool) -> anyhow::Result<Passphrase> {
    if let Ok(p) = std::env::var(PASSPHRASE_ENV) {
        // An empty variable is more often a missing Secret than a choice; a key file
        // "sealed" under it is not sealed.
        if p.is_empty() {
            bail!("{PASSPHRASE_ENV} is set but empty: give the passphrase, or unset it");
        }
        return Ok(Passphrase::new(p));
    }
    if !std::io::stdin().is_terminal() {
        bail!("the key file needs a passphrase: set {PASSPHRASE_ENV} or run on a terminal");
    }
    let p = rpassword::prompt_password("key file passphrase: ")?;
    if confirm && rpassword::prompt_password("again: ")? != p {
        bail!("the passphrases differ");
    }
    if p.is_empty() {
        bail!("empty passphrase");
    }
    Ok(Passphrase::new(p))
}

pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    // The key file's text holds the keys (base64): wiped when dropped, as every reload
    // of the gateway reads it again.
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path)
            .with_context(|| format!("reading key file {}", path.display()))?,
    );
    let sealed = kura_keys::keyfile::is_sealed(&text)
        .with_context(|| format!("key file {}", path.display()))?;
    let passphrase = if sealed {
        Some(passphrase(false)?)
    } else {
        None
    };
    let keyring = Keyring::from_toml(&text, passphrase.as_ref())
        .with_context(|| format!("key file {}", path.display()))?;
    Ok(Loaded {
        keyring,
        passphrase,
    })
}

/// Writes a key file readable by its owner only (`kura_keys::keyfile::write_private`).
/// With `replace`, it replaces an existing file atomically; otherwise it refuses to
/// overwrite.
pub fn save(
    path: &Path,
    keyring: &Keyring,
    passphrase: Option<&Passphrase>,
    replace: bool,
) -> anyhow::Result<()> {
    let existing = if replace {
        Existing::Replace
    } else {
        Existing::Refuse
    };
    keyring
        .save(path, passphrase, existing)
        .with_context(|| format!("writing key file {}", path.display()))
}

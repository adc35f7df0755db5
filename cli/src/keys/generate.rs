//! `kura keys generate`: a new key file with one random key.

use std::path::Path;

use kura_keys::Keyring;

use super::file;

pub fn run(out: &Path, sealed: bool) -> anyhow::Result<()> {
    let passphrase = if sealed {
        Some(file::passphrase(true)?)
    } else {
        None
    };
    let keyring = Keyring::generate(kura_keys::keyfile::timestamp_now())?;
    file::save(out, &keyring, passphrase.as_ref(), false)?;
    eprintln!(
        "kura: wrote key file {} (active key {}). Back it up now: without it, nothing encrypted with it can be read.",
        out.display(),
        keyring.active().id
    );
    Ok(())
}

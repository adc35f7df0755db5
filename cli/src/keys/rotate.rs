//! `kura keys rotate`: add a key and make it active; older keys stay for reading.

use std::path::Path;

use super::file;

pub fn run(path: &Path) -> anyhow::Result<()> {
    let mut loaded = file::load(path)?;
    let id = loaded.keyring.rotate(kura_keys::keyfile::timestamp_now())?;
    file::save(path, &loaded.keyring, loaded.passphrase.as_ref(), true)?;
    eprintln!(
        "kura: key {id} is now active in {}; older keys remain for reading.",
        path.display()
    );
    Ok(())
}

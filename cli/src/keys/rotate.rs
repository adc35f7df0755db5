//! `kura keys rotate`: add a key and make it active, older keys staying for reading; with
//! `--inactive`, add it only, and `kura keys activate` makes it active once every gateway
//! holds it (otherwise, for the minute a Secret takes to reach every pod, one replica
//! seals objects that another cannot read yet).

use std::path::Path;

use anyhow::Context as _;

use super::file;

pub fn run(path: &Path, inactive: bool) -> anyhow::Result<()> {
    let mut loaded = file::load(path)?;
    let created = kura_keys::keyfile::timestamp_now();
    let id = if inactive {
        loaded.keyring.add(created)?
    } else {
        loaded.keyring.rotate(created)?
    };
    file::save(path, &loaded.keyring, loaded.passphrase.as_ref(), true)?;
    if inactive {
        eprintln!(
            "kura: key {id} added to {}, not active: once every gateway has this file, \
             `kura keys activate --key-file {} {id}`.",
            path.display(),
            path.display()
        );
    } else {
        eprintln!(
            "kura: key {id} is now active in {}; older keys remain for reading.",
            path.display()
        );
    }
    Ok(())
}

pub fn activate(path: &Path, id: &str) -> anyhow::Result<()> {
    let id: kura_keys::KeyId = id.parse().ok().with_context(|| {
        format!("{id:?} is not a key ID (16 hex digits, as `kura keys list` shows)")
    })?;
    let mut loaded = file::load(path)?;
    loaded
        .keyring
        .activate(id)
        .with_context(|| format!("key file {}", path.display()))?;
    file::save(path, &loaded.keyring, loaded.passphrase.as_ref(), true)?;
    eprintln!("kura: key {id} is now active in {}.", path.display());
    Ok(())
}

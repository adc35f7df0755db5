//! `kura keys encrypt`: stdin to a single-part kura object on stdout, as the gateway would
//! store it (for tests, and for uploading by hand).

use std::path::Path;

use anyhow::Context as _;
use kura_keys::{Cipher, ObjectName, PartSealer};

use super::file;
use crate::args::ObjectArgs;

pub fn run(path: &Path, object: &ObjectArgs, cipher: &str) -> anyhow::Result<()> {
    let cipher = Cipher::from_name(cipher).with_context(|| format!("unknown cipher {cipher:?}"))?;
    let loaded = file::load(path)?;
    let name = ObjectName::new(&object.bucket, &object.key)?;
    let mut sealer = PartSealer::single_part(&loaded.keyring, &name, cipher)?;
    let mut stdout = std::io::stdout().lock();
    kura_keys::pump(&mut std::io::stdin().lock(), &mut sealer, &mut stdout)
        .context("encrypting")?;
    Ok(())
}

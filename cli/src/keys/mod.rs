//! `kura keys ...`: key files and offline encryption and decryption. One file per command.

mod decrypt;
mod encrypt;
mod file;
mod generate;
mod list;
mod rotate;

use crate::args::KeysCommand;

/// Loads a key file (asking for its passphrase if sealed), for other commands.
pub fn load_key_file(path: &std::path::Path) -> anyhow::Result<kura_keys::Keyring> {
    Ok(file::load(path)?.keyring)
}

pub fn run(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Generate { out, passphrase } => generate::run(&out, passphrase),
        KeysCommand::List { key_file, json } => list::run(&key_file.key_file, json),
        KeysCommand::Rotate { key_file, inactive } => rotate::run(&key_file.key_file, inactive),
        KeysCommand::Activate { key_file, id } => rotate::activate(&key_file.key_file, &id),
        KeysCommand::Encrypt {
            key_file,
            object,
            cipher,
        } => encrypt::run(&key_file.key_file, &object, &cipher),
        KeysCommand::Decrypt {
            key_file,
            object,
            range,
            input,
            unchecked_part_lengths,
        } => decrypt::run(
            &key_file.key_file,
            &object,
            range.as_deref(),
            input.as_deref(),
            unchecked_part_lengths,
        ),
    }
}

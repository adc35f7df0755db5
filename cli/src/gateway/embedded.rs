//! The embedded default: everything in one directory, made on first start.
//!
//! `DIR/objects/` holds the ciphertext (one folder per bucket), `DIR/kura-keys.toml` the key
//! file (unless --key-file names another), `DIR/credentials.toml` the client credentials
//! when none were configured. The key file is announced loudly: losing it loses the data.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use kura_gateway::config::{BucketScope, ClientCredential};
use kura_keys::Keyring;

pub struct Setup {
    pub objects_dir: PathBuf,
    pub keyring: Keyring,
    pub credentials: Vec<ClientCredential>,
}

pub fn random_token(bytes: usize) -> anyhow::Result<String> {
    let mut b = vec![0u8; bytes];
    getrandom(&mut b)?;
    Ok(hex::encode(b))
}

fn getrandom(buf: &mut [u8]) -> anyhow::Result<()> {
    let mut f = std::fs::File::open("/dev/urandom").context("opening /dev/urandom")?;
    std::io::Read::read_exact(&mut f, buf).context("reading /dev/urandom")
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredCredentials {
    access_key_id: String,
    secret_access_key: String,
}

pub fn prepare(
    dir: &Path,
    key_file: Option<&Path>,
    need_credentials: bool,
) -> anyhow::Result<Setup> {
    let objects_dir = dir.join("objects");
    std::fs::create_dir_all(&objects_dir)
        .with_context(|| format!("creating {}", objects_dir.display()))?;
    if let Some(path) = key_file.filter(|p| !p.exists()) {
        // A mistyped path must not start a fresh key that cannot open what is stored.
        bail!(
            "key file {} does not exist: create it with `kura keys generate --out {}`, or leave --key-file out to use (or generate) {}",
            path.display(),
            path.display(),
            dir.join("kura-keys.toml").display()
        );
    }
    let key_path = key_file.map_or_else(|| dir.join("kura-keys.toml"), Path::to_path_buf);
    if !key_path.exists() {
        let keyring = Keyring::generate(crate::keys::now())?;
        crate::keys::save_new_key_file(&key_path, &keyring)?;
        eprintln!(
            "\n!!! kura: generated a NEW KEY FILE at {}\n!!! Everything stored through this gateway is encrypted with it.\n!!! BACK IT UP NOW, away from {}: without it nothing can be decrypted.\n",
            key_path.display(),
            dir.display()
        );
    }
    let keyring = crate::keys::load_key_file(&key_path)?;
    let mut credentials = Vec::new();
    if need_credentials {
        let path = dir.join("credentials.toml");
        if path.exists() {
            println!("kura gateway: client credentials are in {}", path.display());
        } else {
            let stored = StoredCredentials {
                access_key_id: format!("kura{}", random_token(8)?),
                secret_access_key: random_token(20)?,
            };
            write_private(&path, &toml::to_string(&stored)?)?;
            println!(
                "kura gateway: client credentials (also in {}):\n  AWS_ACCESS_KEY_ID={}\n  AWS_SECRET_ACCESS_KEY={}",
                path.display(),
                stored.access_key_id,
                stored.secret_access_key
            );
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let stored: StoredCredentials =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        credentials.push(ClientCredential {
            access_key: stored.access_key_id,
            secret: stored.secret_access_key.into(),
            buckets: BucketScope::All,
        });
    }
    Ok(Setup {
        objects_dir,
        keyring,
        credentials,
    })
}

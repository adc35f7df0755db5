//! The embedded default: everything in one directory, no cloud account, no other server.
//! This file owns that directory's layout, which `README.md` documents as a recovery
//! contract (the ciphertext and the key file are all a user needs to recover data), and the
//! in-process gateway that repository commands start on loopback when no endpoint is given.
//!
//! What the operator is told (the new key file, the generated credentials) is the CLI's
//! to print; this file only makes and reads the files. Its error type lives here, not in
//! `error.rs`, because it wraps the server's: `error.rs` is below `server` in the imports.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kura_keys::keyfile::{Existing, write_private};
use kura_keys::secret::Secret;
use kura_keys::{Cipher, Keyring};
use zeroize::Zeroizing;

use crate::config::{BucketScope, ClientCredential, GatewayConfig, UpstreamConfig};
use crate::server::{Running, ServerError};

/// Where the ciphertext lives under the directory: one folder per bucket.
const OBJECTS_DIR: &str = "objects";
/// The key file, unless the operator names another.
const KEY_FILE: &str = "kura-keys.toml";
/// The client credential generated on first start when none was configured.
const CREDENTIALS_FILE: &str = "credentials.toml";

/// What went wrong while preparing the embedded default or starting a gateway in-process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbeddedError {
    /// A file or directory of the layout could not be made, read or written.
    #[error("{what} {}: {error}", path.display())]
    Io {
        /// What was being done: "creating", "reading", "writing".
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// A key file the operator named is not there. Starting with a fresh key instead would
    /// store data that the key they meant cannot open.
    #[error(
        "key file {} does not exist: create it with `kura keys generate --out {}`, or leave --key-file out to use (or generate) {}",
        named.display(), named.display(), default.display()
    )]
    MissingKeyFile {
        /// The key file named.
        named: PathBuf,
        /// The key file the embedded default would use (or generate) instead.
        default: PathBuf,
    },
    /// The stored credentials file is not what this file writes.
    #[error("parsing {}: {reason}", path.display())]
    BadCredentials {
        /// The credentials file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A key could not be generated or written.
    #[error("{what} {}: {error}", path.display())]
    Keys {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        error: kura_keys::Error,
    },
    /// The system's random generator failed.
    #[error("drawing a random credential: {0}")]
    Random(kura_keys::Error),
    /// The in-process gateway did not start.
    #[error("starting the in-process gateway: {0}")]
    Start(ServerError),
}

/// The embedded default's directory and the files in it.
#[derive(Clone, Debug)]
pub struct EmbeddedDir {
    root: PathBuf,
}

/// A client credential read from, or just written to, the credentials file.
pub struct StoredCredential {
    /// The credential, for every bucket.
    pub credential: ClientCredential,
    /// Whether it was generated now (the operator has not seen it yet).
    pub generated: bool,
}

/// The credentials file as written.
#[derive(serde::Serialize)]
struct CredentialsOut<'a> {
    access_key_id: &'a str,
    secret_access_key: &'a str,
}

/// The credentials file as read.
#[derive(serde::Deserialize)]
struct CredentialsIn {
    access_key_id: String,
    secret_access_key: Secret,
}

impl EmbeddedDir {
    /// The embedded default in `root` (nothing is made until [`EmbeddedDir::prepare`]).
    #[must_use]
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    /// The directory itself.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the ciphertext is stored: `ROOT/objects/BUCKET/KEY`.
    #[must_use]
    pub fn objects_dir(&self) -> PathBuf {
        self.root.join(OBJECTS_DIR)
    }

    /// The key file used when the operator names none: `ROOT/kura-keys.toml`.
    #[must_use]
    pub fn default_key_file(&self) -> PathBuf {
        self.root.join(KEY_FILE)
    }

    /// The generated client credential: `ROOT/credentials.toml`.
    #[must_use]
    pub fn credentials_file(&self) -> PathBuf {
        self.root.join(CREDENTIALS_FILE)
    }

    /// Makes the objects directory and settles the key file: `named` if given (which must
    /// exist), else the default one, generated here when absent. Returns the key file's
    /// path and whether it was generated now, so that the caller can tell the operator to
    /// back it up.
    ///
    /// # Errors
    /// [`EmbeddedError::MissingKeyFile`] for a named key file that is not there; I/O and
    /// key errors otherwise.
    pub fn prepare(&self, named: Option<&Path>) -> Result<(PathBuf, bool), EmbeddedError> {
        let objects = self.objects_dir();
        std::fs::create_dir_all(&objects).map_err(|error| EmbeddedError::Io {
            what: "creating",
            path: objects.clone(),
            error,
        })?;
        if let Some(path) = named {
            if !path.exists() {
                return Err(EmbeddedError::MissingKeyFile {
                    named: path.to_path_buf(),
                    default: self.default_key_file(),
                });
            }
            return Ok((path.to_path_buf(), false));
        }
        let path = self.default_key_file();
        if path.exists() {
            return Ok((path, false));
        }
        let keys_error = |what| {
            let path = path.clone();
            move |error| EmbeddedError::Keys { what, path, error }
        };
        let keyring = Keyring::generate(kura_keys::keyfile::timestamp_now())
            .map_err(keys_error("generating a key for"))?;
        keyring
            .save(&path, None, Existing::Refuse)
            .map_err(keys_error("writing key file"))?;
        Ok((path, true))
    }

    /// The client credential of the credentials file, generated (and written, readable by
    /// its owner only) when the file is absent.
    ///
    /// # Errors
    /// I/O errors, a credentials file that does not parse, or a failing random generator.
    pub fn client_credential(&self) -> Result<StoredCredential, EmbeddedError> {
        let path = self.credentials_file();
        let generated = !path.exists();
        if generated {
            let secret = Secret::new(random_token(20)?);
            let stored = CredentialsOut {
                access_key_id: &format!("kura{}", random_token(8)?),
                secret_access_key: secret.expose(),
            };
            let text = Zeroizing::new(toml::to_string(&stored).map_err(|e| {
                EmbeddedError::BadCredentials {
                    path: path.clone(),
                    reason: e.to_string(),
                }
            })?);
            write_private(&path, text.as_bytes(), Existing::Refuse).map_err(|error| {
                EmbeddedError::Keys {
                    what: "writing",
                    path: path.clone(),
                    error,
                }
            })?;
        }
        let text =
            Zeroizing::new(
                std::fs::read_to_string(&path).map_err(|error| EmbeddedError::Io {
                    what: "reading",
                    path: path.clone(),
                    error,
                })?,
            );
        let stored: CredentialsIn =
            toml::from_str(&text).map_err(|e| EmbeddedError::BadCredentials {
                path: path.clone(),
                reason: kura_keys::keyfile::describe_toml_error(&e, &text),
            })?;
        Ok(StoredCredential {
            credential: ClientCredential {
                access_key: stored.access_key_id,
                secret: stored.secret_access_key.expose().to_owned().into(),
                buckets: BucketScope::All,
                powers: crate::powers::Powers::default(),
            },
            generated,
        })
    }
}

/// `bytes` random bytes as lower-case hex, from the workspace's one random source.
///
/// # Errors
/// [`EmbeddedError::Random`] when the system's generator fails.
pub fn random_token(bytes: usize) -> Result<String, EmbeddedError> {
    let mut b = vec![0u8; bytes];
    kura_keys::rand::fill(&mut b).map_err(EmbeddedError::Random)?;
    Ok(hex::encode(b))
}

/// A gateway serving one `kura` command over loopback (`kura backup` and friends without
/// an endpoint), with a random credential that lives as long as the process. It serves
/// until this value is dropped.
pub struct InProcess {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The one-off access key.
    pub access_key: String,
    /// The one-off secret.
    pub secret_key: Secret,
    /// The running gateway.
    pub running: Running,
}

/// Starts a gateway on a loopback port in front of `upstream`, sealing under `keyring`.
///
/// # Errors
/// [`EmbeddedError::Random`] when no credential can be drawn, [`EmbeddedError::Start`]
/// when the gateway does not start.
pub async fn start_in_process(
    upstream: UpstreamConfig,
    keyring: Keyring,
) -> Result<InProcess, EmbeddedError> {
    let access_key = format!("kura-cli-{}", random_token(6)?);
    let secret_key = Secret::new(random_token(20)?);
    let config = GatewayConfig {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        admin_listen: None,
        upstream,
        keyring: Arc::new(keyring),
        cipher: Cipher::Aes256Gcm,
        credentials: vec![ClientCredential {
            access_key: access_key.clone(),
            secret: secret_key.expose().to_owned().into(),
            buckets: BucketScope::All,
            powers: crate::powers::Powers::default(),
        }],
        tls: None,
        virtual_host_domain: None,
        limits: crate::config::Limits::default(),
    };
    let running = crate::server::start(config)
        .await
        .map_err(EmbeddedError::Start)?;
    Ok(InProcess {
        endpoint: format!("http://{}", running.addr),
        access_key,
        secret_key,
        running,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credentials_file_that_does_not_parse_is_described_without_quoting_its_lines() {
        let dir = tempfile::tempdir().unwrap();
        let embedded = EmbeddedDir::new(dir.path());
        let secret = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(
            embedded.credentials_file(),
            format!("access_key_id = \"kura1\"\nsecret_access_key = \"{secret}\n"),
        )
        .unwrap();
        let err = embedded.client_credential().err().unwrap().to_string();
        assert!(!err.contains(secret), "{err}");
        assert!(err.contains("line 2"), "says where: {err}");
    }
}

//! The gateway's configuration: the TOML file format ([`FileConfig`]) and the checked
//! configuration ([`GatewayConfig`]) that the `kura gateway` command builds from the file
//! and its flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kura_keys::secret::Secret;
use kura_keys::{Cipher, Keyring};
use serde::Deserialize;

use crate::error::SecretError;

/// A secret given inline, in a file, or in an environment variable.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct SecretSource {
    /// The secret itself (discouraged: config files get copied around).
    pub secret_access_key: Option<Secret>,
    /// A file holding the secret (trailing newline ignored), e.g. a mounted Kubernetes secret.
    pub secret_access_key_file: Option<PathBuf>,
    /// An environment variable holding the secret.
    pub secret_access_key_env: Option<String>,
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSource")
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("secret_access_key_file", &self.secret_access_key_file)
            .field("secret_access_key_env", &self.secret_access_key_env)
            .finish()
    }
}

impl SecretSource {
    /// Whether any of the three places is given.
    #[must_use]
    pub fn is_given(&self) -> bool {
        self.secret_access_key.is_some()
            || self.secret_access_key_file.is_some()
            || self.secret_access_key_env.is_some()
    }

    /// Resolves the secret, from exactly one of the three places.
    ///
    /// # Errors
    /// [`SecretError`] when none or several are given, the file or variable is missing, or
    /// the secret is empty.
    pub fn resolve(&self, what: &str) -> Result<Secret, SecretError> {
        let what = || what.to_string();
        let secret = match (
            &self.secret_access_key,
            &self.secret_access_key_file,
            &self.secret_access_key_env,
        ) {
            (Some(s), None, None) => Ok(s.clone()),
            (None, Some(path), None) => std::fs::read_to_string(path)
                .map(|s| Secret::from(zeroize::Zeroizing::new(s).trim_end_matches(['\n', '\r'])))
                .map_err(|error| SecretError::Read {
                    what: what(),
                    path: path.clone(),
                    error,
                }),
            (None, None, Some(var)) => {
                std::env::var(var)
                    .map(Secret::new)
                    .map_err(|_| SecretError::Unset {
                        what: what(),
                        var: var.clone(),
                    })
            }
            (None, None, None) => Err(SecretError::Missing { what: what() }),
            _ => Err(SecretError::Several { what: what() }),
        }?;
        if secret.is_empty() {
            return Err(SecretError::Empty { what: what() });
        }
        Ok(secret)
    }
}

/// The default time limit of one attempt of an upstream call that answers in about a round
/// trip: far above a healthy service's answer to a listing, HEAD or delete, and below the
/// 60 s read timeout of clients such as aws-cli, so that the gateway's retry comes first.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// One client credential in the config file.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileCredential {
    /// The access key ID clients sign with.
    pub access_key_id: String,
    /// Its secret.
    #[serde(flatten)]
    pub secret: SecretSource,
    /// Buckets this key may use; `["*"]` for all.
    pub buckets: Vec<String>,
    /// Powers this key is given by name (`powers.rs`); none by default.
    #[serde(default)]
    pub powers: Vec<String>,
}

/// The upstream section of the config file.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileUpstream {
    /// Endpoint URL of the S3 service (Backblaze B2, AWS S3, MinIO, Garage).
    pub url: Option<String>,
    /// Region to sign upstream requests for.
    pub region: Option<String>,
    /// Path-style upstream requests (`host/bucket/key`) instead of virtual-host style.
    pub path_style: Option<bool>,
    /// PEM bundle of CAs to trust for the upstream's TLS, in addition to the system's.
    pub ca_bundle: Option<PathBuf>,
    /// Upstream access key ID; without it the standard AWS chain is used (env, profile).
    pub access_key_id: Option<String>,
    /// Upstream secret, with `access_key_id`.
    #[serde(flatten)]
    pub secret: SecretSource,
    /// Seconds one attempt of an upstream call may take, for calls that answer in about a
    /// round trip (all but uploads and server-side copies), before it is retried.
    pub timeout: Option<u64>,
}

/// The config file (`kura gateway --config FILE`). Every field has a flag of the same name
/// (with dashes), and a flag wins over the file.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address to serve S3 on.
    pub listen: Option<SocketAddr>,
    /// Separate address for `/healthz`, `/readyz` and `/metrics`; `listen` then leaves those
    /// paths to S3 (a bucket may be called `metrics`).
    pub admin_listen: Option<SocketAddr>,
    /// The key file.
    pub key_file: Option<PathBuf>,
    /// Directory of the embedded upstream (used when no upstream URL is set).
    pub data_dir: Option<PathBuf>,
    /// Cipher for new objects: `aes-256-gcm` (default) or `chacha20-poly1305`.
    pub cipher: Option<String>,
    /// Base domain for virtual-host-style requests (`bucket.DOMAIN`), with the port clients use.
    pub virtual_host_domain: Option<String>,
    /// TLS certificate chain (PEM).
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Upstream S3 service.
    #[serde(default)]
    pub upstream: FileUpstream,
    /// Client credentials.
    #[serde(default)]
    pub credentials: Vec<FileCredential>,
    /// Log format: `text` (default) or `json`.
    pub log_format: Option<String>,
    /// Worker threads (default: one per CPU core).
    pub worker_threads: Option<usize>,
    /// Client connections served at once (default 512); more are answered 503 SlowDown.
    pub max_connections: Option<usize>,
    /// Seconds a client connection may send or read nothing it owes before it is closed
    /// (default 30).
    pub idle_timeout: Option<u64>,
}

/// Which buckets a client key may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketScope {
    /// Every bucket.
    All,
    /// Only these.
    Only(Vec<String>),
}

impl BucketScope {
    /// From a config list, where `*` means all.
    #[must_use]
    pub fn from_list(list: &[String]) -> Self {
        if list.iter().any(|b| b == "*") {
            BucketScope::All
        } else {
            BucketScope::Only(list.to_vec())
        }
    }

    /// Whether `bucket` is in scope.
    #[must_use]
    pub fn allows(&self, bucket: &str) -> bool {
        match self {
            BucketScope::All => true,
            BucketScope::Only(list) => list.iter().any(|b| b == bucket),
        }
    }
}

/// A checked client credential.
#[derive(Clone)]
pub struct ClientCredential {
    /// Access key ID.
    pub access_key: String,
    /// Secret key (zeroized, never printed).
    pub secret: s3s::auth::SecretKey,
    /// Buckets it may use.
    pub buckets: BucketScope,
    /// Request fields that act with the gateway's upstream identity which it may use.
    pub powers: crate::powers::Powers,
}

/// Where the gateway stores ciphertext.
#[derive(Clone)]
pub enum UpstreamConfig {
    /// The embedded default: a local directory, served in-process by s3s-fs, no HTTP hop.
    Local {
        /// The directory.
        dir: PathBuf,
    },
    /// An S3 service reached with aws-sdk-s3.
    S3 {
        /// Endpoint URL.
        url: String,
        /// Signing region.
        region: String,
        /// Path-style addressing.
        path_style: bool,
        /// Extra CA bundle (PEM).
        ca_bundle: Option<PathBuf>,
        /// Static credentials; `None` for the AWS default chain.
        credentials: Option<(String, Secret)>,
        /// Time limit of one attempt of an upstream call that answers in about a round
        /// trip (all but uploads and server-side copies); a timed-out attempt is retried.
        timeout: Duration,
    },
}

impl std::fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Local { dir } => f.debug_struct("Local").field("dir", dir).finish(),
            Self::S3 {
                url,
                region,
                path_style,
                ca_bundle,
                credentials,
                timeout,
            } => f
                .debug_struct("S3")
                .field("url", url)
                .field("region", region)
                .field("path_style", path_style)
                .field("ca_bundle", ca_bundle)
                .field(
                    "credentials",
                    &credentials.as_ref().map(|(ak, _)| (ak, "<redacted>")),
                )
                .field("timeout", timeout)
                .finish(),
        }
    }
}

/// TLS certificate and key files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
}

/// How many client connections the gateway serves at once by default: a sidecar serves
/// one program (Velero, Kopia), which opens a few dozen; beyond the cap a connection is
/// answered 503 SlowDown.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// How long a client connection may send nothing it owes (a request head, the next bytes
/// of a body) or read nothing it is sent, by default, before it is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What bounds the gateway's resources under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Client connections served at once on the S3 listener; more are answered 503
    /// SlowDown with `Retry-After`, and as many again beyond that are closed unanswered.
    pub max_connections: usize,
    /// How long a connection may wait for its client: for a request head (or the next one
    /// on a keep-alive connection), for the next bytes of a request body, or for room to
    /// write a response the client stopped reading.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Everything the gateway needs, checked.
#[derive(Clone)]
pub struct GatewayConfig {
    /// S3 listen address.
    pub listen: SocketAddr,
    /// Optional admin listen address.
    pub admin_listen: Option<SocketAddr>,
    /// Where ciphertext goes.
    pub upstream: UpstreamConfig,
    /// The keys.
    pub keyring: Arc<Keyring>,
    /// Cipher for new objects.
    pub cipher: Cipher,
    /// Client credentials.
    pub credentials: Vec<ClientCredential>,
    /// HTTPS, when set.
    pub tls: Option<TlsFiles>,
    /// Virtual-host base domain.
    pub virtual_host_domain: Option<String>,
    /// Connection cap and idle timeouts.
    pub limits: Limits,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_debug_never_shows_the_secret() {
        let config = UpstreamConfig::S3 {
            url: "https://s3.example".into(),
            region: "us-east-1".into(),
            path_style: false,
            ca_bundle: None,
            credentials: Some(("AKIDEXAMPLE".into(), Secret::from("wJalrXUtnFEMIK7MDENG"))),
            timeout: DEFAULT_UPSTREAM_TIMEOUT,
        };
        let shown = format!("{config:?}");
        assert!(shown.contains("AKIDEXAMPLE"), "{shown}");
        assert!(!shown.contains("wJalrXUtnFEMIK7MDENG"), "{shown}");
    }

    #[test]
    fn an_empty_secret_is_refused() {
        let source = SecretSource {
            secret_access_key: Some(Secret::from("")),
            ..SecretSource::default()
        };
        assert!(
            source
                .resolve("test")
                .err()
                .unwrap()
                .to_string()
                .contains("empty")
        );
    }
}

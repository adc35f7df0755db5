//! A gateway configuration for tests: listening on a free loopback port, in front of an
//! in-process [`Upstream`], with the upstream's credential and the clients' credentials the
//! test names. Tests start it with `kura_gateway::server::start`.

use std::sync::Arc;

use kura_gateway::config::{
    BucketScope, ClientCredential, DEFAULT_UPSTREAM_TIMEOUT, GatewayConfig, UpstreamConfig,
};
use kura_keys::{Cipher, Keyring};

use crate::upstream::{UP_AK, UP_SK, Upstream};

/// A client credential that may use every bucket.
#[must_use]
pub fn credential(access_key: &str, secret: &str) -> ClientCredential {
    ClientCredential {
        access_key: access_key.into(),
        secret: secret.to_owned().into(),
        buckets: BucketScope::All,
        powers: kura_gateway::powers::Powers::default(),
    }
}

/// A gateway on `127.0.0.1:0` (no separate admin port, no TLS, path-style only) that
/// forwards to `upstream` as [`UP_AK`], seals with AES-256-GCM under `keyring`, and accepts
/// `credentials`.
///
/// # Panics
/// Never: the listen address is a literal.
#[must_use]
pub fn loopback_config(
    upstream: &Upstream,
    keyring: Arc<Keyring>,
    credentials: Vec<ClientCredential>,
) -> GatewayConfig {
    GatewayConfig {
        listen: "127.0.0.1:0".parse().expect("a literal address"),
        admin_listen: None,
        upstream: UpstreamConfig::S3 {
            url: upstream.url(),
            region: "us-east-1".into(),
            path_style: true,
            ca_bundle: None,
            credentials: Some((UP_AK.into(), UP_SK.into())),
            timeout: DEFAULT_UPSTREAM_TIMEOUT,
        },
        keyring,
        cipher: Cipher::Aes256Gcm,
        credentials,
        tls: None,
        virtual_host_domain: None,
        limits: kura_gateway::config::Limits::default(),
    }
}

/// A new key file's keyring, for a test's gateway.
///
/// # Panics
/// When the system's random generator fails.
#[must_use]
pub fn keyring() -> Arc<Keyring> {
    Arc::new(Keyring::generate("test".into()).expect("a new keyring"))
}

//! Serving: hyper over TCP or TLS (tokio-rustls), the s3s service behind a thin router that
//! answers `/healthz`, `/readyz` and `/metrics` itself, a request ID on every response and
//! in every log line, and a graceful shutdown that drains in-flight requests.

//!
//! - `route.rs`: one request, from hyper to s3s or an admin endpoint and back.
//! - `admin.rs`: `/healthz`, `/readyz`, `/metrics`.
//! - `listen.rs`: the accept loop, its connection cap and time limits, and the drain on
//!   shutdown.
//! - `idle.rs`: the idle timeouts of request bodies and of responses a client stops reading.
//! - here: [`start`], which builds the gateway and its listeners, and [`Running`].

mod admin;
mod idle;
mod listen;
mod route;

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use kura_keys::Keyring;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::admin::Admin;
pub use self::listen::TLS_HANDSHAKE_TIMEOUT;
use self::listen::accept_loop;
use self::route::App;
use crate::config::GatewayConfig;
use crate::credentials::Credentials;
use crate::error::CredentialsError;
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::reload::{KeySource, Reloader};
use crate::upstream::{Upstream, UpstreamError};

/// The largest XML request body read (CompleteMultipartUpload of 10,000 parts with
/// checksums, DeleteObjects of 1,000 long keys: each under 2 MiB); s3s's default is 20 MiB,
/// which a client could make the gateway hold per connection.
pub const XML_MAX_BODY_SIZE: usize = 2 * 1024 * 1024;

/// Connections the admin listener serves at once: probes and a scraper.
const ADMIN_MAX_CONNECTIONS: usize = 16;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The upstream could not be set up.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A listen address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// The virtual-host domain is not a valid domain.
    #[error("virtual-host domain: {0}")]
    Domain(String),
    /// The client credentials cannot be used (empty or repeated access key, empty secret).
    #[error("client credentials: {0}")]
    Credentials(CredentialsError),
}

/// A started gateway.
pub struct Running {
    /// Where it serves S3.
    pub addr: SocketAddr,
    /// Where it serves the admin endpoints, when separate.
    pub admin_addr: Option<SocketAddr>,
    /// Its metrics.
    pub metrics: Metrics,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    keyring: Arc<ArcSwap<Keyring>>,
    tls: Option<(
        crate::config::TlsFiles,
        Arc<ArcSwap<tokio_rustls::TlsAcceptor>>,
    )>,
    reloader: Option<Arc<Reloader>>,
}

impl Running {
    /// Reloads the key file (`keys`) and the TLS certificate and key, when given, whenever
    /// their bytes change, and on SIGHUP with `on_sighup`, until shutdown (`reload.rs`).
    pub fn reload_on_change(&mut self, keys: Option<KeySource>, on_sighup: bool) {
        let reloader = Arc::new(Reloader::new(
            keys.map(|k| (k, self.keyring.clone())),
            self.tls.clone(),
            self.metrics.clone(),
        ));
        self.tasks.push(tokio::spawn(crate::reload::run(
            reloader.clone(),
            on_sighup,
            self.stop.subscribe(),
        )));
        self.reloader = Some(reloader);
    }

    /// Reloads now, as SIGHUP does, once [`Running::reload_on_change`] set up what; returns
    /// whether every file loaded (a file that did not is refused and logged).
    pub async fn reload_now(&self) -> bool {
        let Some(r) = self.reloader.clone() else {
            return false;
        };
        tokio::task::spawn_blocking(move || r.reload("asked", true))
            .await
            .unwrap_or(false)
    }

    /// Stops accepting, waits for in-flight requests (up to 30 s), and returns.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// s3s's limits: XML bodies of at most [`XML_MAX_BODY_SIZE`]. POST form uploads are refused
/// before s3s sees them (`post_form_refused`); should one get through, s3s, which reads a
/// form before any access check, may read next to nothing of it.
fn s3s_config() -> s3s::config::S3Config {
    let mut c = s3s::config::S3Config::default();
    c.xml_max_body_size = XML_MAX_BODY_SIZE;
    c.post_object_max_file_size = 0;
    c.form_max_field_size = 4096;
    c.form_max_fields_size = 16 * 1024;
    c.form_max_parts = 16;
    c
}

/// Builds the gateway, binds its addresses, and serves until [`Running::shutdown`].
///
/// # Errors
/// [`ServerError`] when the upstream, the addresses or TLS cannot be set up.
pub async fn start(config: GatewayConfig) -> Result<Running, ServerError> {
    let upstream = Upstream::connect(&config.upstream).await?;
    start_with_upstream(config, upstream).await
}

/// [`start`] with an upstream built by the caller.
///
/// # Errors
/// As [`start`].
pub async fn start_with_upstream(
    config: GatewayConfig,
    upstream: Upstream,
) -> Result<Running, ServerError> {
    let metrics = Metrics::default();
    let credentials =
        Credentials::new(config.credentials.clone()).map_err(ServerError::Credentials)?;
    let keyring = Arc::new(ArcSwap::new(config.keyring.clone()));
    let gateway = Gateway::new(
        upstream.clone(),
        keyring.clone(),
        config.cipher,
        credentials.clone(),
        metrics.clone(),
    );
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(credentials.clone());
    builder.set_access(credentials);
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        s3s_config(),
    ))));
    let vhost = config
        .virtual_host_domain
        .as_deref()
        .map(crate::host::BaseDomain::new)
        .transpose()
        .map_err(ServerError::Domain)?;
    if let Some(host) = &vhost {
        builder.set_host(host.clone());
    }
    let probe_bucket = config.credentials.iter().find_map(|c| match &c.buckets {
        crate::config::BucketScope::Only(names) => names.first().cloned(),
        crate::config::BucketScope::All => None,
    });
    let app = App {
        s3: builder.build(),
        metrics: metrics.clone(),
        admin: Admin::new(metrics.clone(), upstream, probe_bucket),
        admin_elsewhere: config.admin_listen.is_some(),
        vhost,
        idle_timeout: config.limits.idle_timeout,
    };
    let tls = config
        .tls
        .as_ref()
        .map(|files| {
            crate::tls::acceptor(files).map(|a| (files.clone(), Arc::new(ArcSwap::from_pointee(a))))
        })
        .transpose()
        .map_err(ServerError::Tls)?;
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })
    };
    let listener = bind(config.listen).await?;
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: config.listen,
        source,
    })?;
    let (stop, rx) = watch::channel(false);
    let mut tasks = vec![tokio::spawn(accept_loop(
        listener,
        app.clone(),
        tls.as_ref().map(|(_, a)| a.clone()),
        false,
        config.limits,
        rx.clone(),
    ))];
    let mut admin_addr = None;
    if let Some(a) = config.admin_listen {
        let l = bind(a).await?;
        admin_addr = l.local_addr().ok();
        // Probes and a scraper: a handful of connections.
        let limits = crate::config::Limits {
            max_connections: ADMIN_MAX_CONNECTIONS,
            ..config.limits
        };
        tasks.push(tokio::spawn(accept_loop(l, app, None, true, limits, rx)));
    }
    if let Err(value) = kura_keys::AesBackend::env_override() {
        tracing::warn!(
            value,
            "{} names no AES backend (aws-lc or ring); choosing by CPU",
            kura_keys::AES_BACKEND_ENV
        );
    }
    tracing::info!(
        %addr,
        tls = config.tls.is_some(),
        aes_backend = kura_keys::AesBackend::active().name(),
        "kura gateway listening"
    );
    Ok(Running {
        addr,
        admin_addr,
        metrics,
        stop,
        tasks,
        keyring,
        tls,
        reloader: None,
    })
}

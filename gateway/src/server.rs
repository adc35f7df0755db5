//! Serving: hyper over TCP or TLS (tokio-rustls), the s3s service behind a thin router that
//! answers `/healthz`, `/readyz` and `/metrics` itself, a request ID on every response and
//! in every log line, and a graceful shutdown that drains in-flight requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::chunk_guard::{ChunkGuard, Framing};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tracing::Instrument as _;

use crate::config::{GatewayConfig, TlsFiles};
use crate::credentials::Credentials;
use crate::error::CredentialsError;
use crate::gateway::Gateway;
use crate::metrics::{Metrics, OperationSlot};
use crate::upstream::{Upstream, UpstreamError, request};

/// How long a shutdown waits for in-flight requests.
const DRAIN: Duration = Duration::from_secs(30);

/// How long a connection may take to send a request's head (and an idle keep-alive
/// connection may wait for its next one) before it is closed: sockets that send nothing
/// must not pile up until the gateway runs out of file descriptors.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause after a failed `accept` (out of file descriptors, say), so that the loop does
/// not spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

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
}

impl Running {
    /// Stops accepting, waits for in-flight requests (up to 30 s), and returns.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

#[derive(Clone)]
struct App {
    s3: S3Service,
    metrics: Metrics,
    upstream: Upstream,
    admin_elsewhere: bool,
    /// The virtual-host base domain: a request to `BUCKET.DOMAIN` is never an admin one.
    vhost: Option<crate::host::BaseDomain>,
    /// The last readiness answer, and when it was had.
    ready: Arc<tokio::sync::Mutex<Option<Readiness>>>,
    /// A bucket the client credentials name, for readiness when the upstream refuses to
    /// list buckets.
    probe_bucket: Option<String>,
}

/// A readiness answer (`Err` holds the upstream's error code) and when it was had.
type Readiness = (Instant, Result<(), String>);

/// How long a readiness answer is kept.
const READY_FOR: Duration = Duration::from_secs(5);

fn text(status: StatusCode, body: String) -> Response<s3s::Body> {
    let mut r = Response::new(s3s::Body::from(body));
    *r.status_mut() = status;
    r
}

/// The request with its body as s3s takes it: an aws-chunked body (detected, as s3s does,
/// by a `STREAMING-` payload hash) behind [`ChunkGuard`].
fn body_of(req: Request<Incoming>) -> Request<s3s::Body> {
    let header = |name: &str| req.headers().get(name).map(http::HeaderValue::as_bytes);
    let framing = match header("x-amz-content-sha256") {
        Some(b"STREAMING-UNSIGNED-PAYLOAD-TRAILER") => Some(Framing::Unsigned {
            decoded: header("x-amz-decoded-content-length")
                .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()),
        }),
        Some(v) if v.starts_with(b"STREAMING-") => Some(Framing::Signed),
        _ => None,
    };
    req.map(|b| {
        let body = s3s::Body::from(b);
        match framing {
            Some(framing) => {
                let guarded: s3s::stream::DynByteStream = Box::pin(ChunkGuard::new(body, framing));
                s3s::Body::from(guarded)
            }
            None => body,
        }
    })
}

/// Whether `req` is a POST form upload (a browser upload signed with a POST policy).
fn is_post_form(req: &Request<Incoming>) -> bool {
    req.method() == http::Method::POST
        && req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .get(..19)
                    .is_some_and(|t| t.eq_ignore_ascii_case("multipart/form-data"))
            })
}

/// 501 NotImplemented for a POST form upload, answered without reading its body: s3s
/// parses a form's fields (up to 20 MiB, again from the start after every piece that
/// arrives) before it checks the signature, so a form sent by anyone would hold memory and
/// CPU for as long as its sender trickles it. The connection is closed after the answer.
/// s3s takes every POST of that content type for a form, also a CreateMultipartUpload of an
/// object of that type (it fails with MalformedPOSTRequest), so all of them are refused.
fn post_form_refused() -> Response<s3s::Body> {
    let mut r = text(
        StatusCode::NOT_IMPLEMENTED,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NotImplemented</Code>\
         <Message>POST requests with Content-Type multipart/form-data (form uploads, or a \
         multipart upload of an object of that type) are not supported by kura</Message>\
         </Error>"
            .into(),
    );
    let headers = r.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    r
}

impl App {
    /// Ready when the upstream answers a ListBuckets. Bucket-scoped credentials (as
    /// Velero's documented policy) may not list buckets and get AccessDenied; then, when the
    /// client credentials name a bucket, a HeadBucket of it must answer (or find no such
    /// bucket): Garage also says AccessDenied for a key it does not know. With no bucket
    /// named, AccessDenied is ready (AWS and B2 check the key before the policy). The
    /// answer is kept for [`READY_FOR`], so that probes (unauthenticated, when the admin
    /// paths share the S3 port) cannot drive upstream calls, which B2 bills, at their own
    /// rate.
    async fn upstream_ready(&self) -> Result<(), String> {
        // Held across the upstream calls on purpose: concurrent probes wait for one answer.
        let mut last = self.ready.lock().await;
        if let Some((at, answer)) = last.as_ref()
            && at.elapsed() < READY_FOR
        {
            return answer.clone();
        }
        let answer = self
            .upstream
            .s3()
            .list_buckets(request(s3s::dto::ListBucketsInput::default()))
            .await
            .map(|_| ());
        let answer = match (answer, &self.probe_bucket) {
            (Err(e), Some(bucket)) if *e.code() == s3s::S3ErrorCode::AccessDenied => {
                let input = s3s::dto::HeadBucketInput {
                    bucket: bucket.clone(),
                    ..Default::default()
                };
                match self.upstream.s3().head_bucket(request(input)).await {
                    Ok(_) => Ok(()),
                    // A HEAD answer has no body: a 404 is `NotFound`.
                    Err(e) if matches!(e.code().as_str(), "NoSuchBucket" | "NotFound") => Ok(()),
                    Err(e) => Err(format!("{} (HeadBucket {bucket})", e.code().as_str())),
                }
            }
            (Err(e), None) if *e.code() == s3s::S3ErrorCode::AccessDenied => Ok(()),
            (answer, _) => answer.map_err(|e| e.code().as_str().to_string()),
        };
        *last = Some((Instant::now(), answer.clone()));
        answer
    }

    /// The admin endpoint at `path`, if there is one, as (its name as a metrics label, its
    /// response).
    async fn admin(&self, path: &str) -> Option<(&'static str, Response<s3s::Body>)> {
        let resp = match path {
            "/healthz" => ("healthz", text(StatusCode::OK, "ok\n".into())),
            "/readyz" => {
                let resp = match self.upstream_ready().await {
                    Ok(()) => text(StatusCode::OK, "ready\n".into()),
                    Err(code) => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("upstream not ready: {code}\n"),
                    ),
                };
                ("readyz", resp)
            }
            "/metrics" => {
                let mut r = text(StatusCode::OK, self.metrics.render());
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                ("metrics", r)
            }
            _ => return None,
        };
        Some(resp)
    }

    /// Whether `req`'s host is `BUCKET.DOMAIN` under the virtual-host base domain.
    fn names_bucket(&self, req: &Request<Incoming>) -> bool {
        let Some(domain) = &self.vhost else {
            return false;
        };
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(http::uri::Authority::as_str));
        host.is_some_and(|h| domain.bucket_of(h).is_some())
    }

    async fn handle(
        self,
        mut req: Request<Incoming>,
        admin_only: bool,
    ) -> Result<Response<s3s::Body>, s3s::HttpError> {
        let started = Instant::now();
        let operation = OperationSlot::default();
        // s3s hands the request's extensions to the operation, which names itself there.
        req.extensions_mut().insert(operation.clone());
        let request_id = format!("{:016x}", rand_u64());
        let span = tracing::info_span!("request", id = %request_id, method = %req.method(), path = %req.uri().path());
        let expects_continue = req
            .headers()
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let declares_empty_body = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() == b"0");
        async move {
            // With a separate admin listener, the S3 listener leaves these paths to S3 (a
            // bucket may be called `metrics`).
            // Nor on a virtual-host request: `GET /metrics` with `Host: velero.DOMAIN` reads
            // the object `metrics` of bucket `velero`.
            let serve_admin = admin_only || (!self.admin_elsewhere && !self.names_bucket(&req));
            let admin = if serve_admin
                && req.method() == http::Method::GET
                && req.uri().query().is_none()
            {
                self.admin(req.uri().path()).await
            } else {
                None
            };
            let mut resp = match admin {
                Some((name, r)) => {
                    operation.set(name);
                    r
                }
                None if admin_only => text(StatusCode::NOT_FOUND, "not found\n".into()),
                None if is_post_form(&req) => post_form_refused(),
                None => self.s3.call(body_of(req)).await?,
            };
            if let Some(crate::s3::Status(status)) = resp.extensions().get() {
                *resp.status_mut() = *status;
            }
            if let Ok(v) = http::HeaderValue::from_str(&request_id) {
                resp.headers_mut().insert("x-amz-request-id", v);
            }
            if expects_continue && (declares_empty_body || !resp.status().is_success()) {
                // hyper sends `100 Continue` only when the body is read, so these requests
                // get their final answer straight away. botocore (aws-cli, boto3) then
                // parses the next response on the same connection as if its status line
                // were already read, loses its headers and waits for a body until its read
                // timeout (60 s). A fresh connection avoids that.
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            let status = resp.status().as_u16();
            let operation = operation.label();
            self.metrics.request(operation, status, started.elapsed());
            tracing::info!(
                operation,
                status,
                elapsed_ms = started.elapsed().as_millis(),
                "served"
            );
            Ok(resp)
        }
        .instrument(span)
        .await
    }
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    // A request ID needs no cryptographic strength; fall back to the clock.
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).is_err() {
        return u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                & u128::from(u64::MAX),
        )
        .unwrap_or(0);
    }
    u64::from_be_bytes(b)
}

fn tls_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, ServerError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| ServerError::Tls(format!("{}: {e}", p.display())))
    };
    let cert_pem = read(&files.cert)?;
    let key_pem = read(&files.key)?;
    let certs = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServerError::Tls(format!("certificate: {e}")))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| ServerError::Tls(format!("key: {e}")))?
        .ok_or_else(|| ServerError::Tls("no private key in the key file".into()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ServerError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| ServerError::Tls(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

async fn accept_loop(
    listener: TcpListener,
    app: App,
    tls: Option<TlsAcceptor>,
    admin_only: bool,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    // HTTP/1.1 only: S3 clients speak nothing else to an S3 endpoint (TLS here offers no
    // ALPN), and so hyper's header timer runs from the first moment; the auto builder
    // would first wait, without a limit, for bytes that tell HTTP/1 from HTTP/2.
    let mut conn = ConnBuilder::new(TokioExecutor::new()).http1_only();
    conn.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (socket, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        // A response's head and a short body go out as separate writes; with Nagle on,
        // the second waits for the client's delayed ACK (40 ms on Linux).
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |req| app.clone().handle(req, admin_only));
        match &tls {
            None => {
                let c = conn
                    .serve_connection(TokioIo::new(socket), service)
                    .into_owned();
                let c = graceful.watch(c);
                tokio::spawn(async move {
                    if let Err(e) = c.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let conn = conn.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(socket))
                        .await
                        .unwrap_or_else(|_| {
                            Err(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                "TLS handshake took too long",
                            ))
                        }) {
                        Ok(stream) => {
                            let c = conn
                                .serve_connection(TokioIo::new(stream), service)
                                .into_owned();
                            if let Err(e) = watcher.watch(c).await {
                                tracing::debug!(%peer, error = %e, "connection ended with an error");
                            }
                        }
                        Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    }
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within {DRAIN:?}; closing them");
    }
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
    let gateway = Gateway::new(
        upstream.clone(),
        config.keyring.clone(),
        config.cipher,
        credentials.clone(),
        metrics.clone(),
    );
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(credentials.clone());
    builder.set_access(credentials);
    // POST form uploads are refused before s3s sees them (`post_form_refused`); should one
    // get through, s3s, which reads a form before any access check, may read next to
    // nothing of it.
    let mut s3s_config = s3s::config::S3Config::default();
    s3s_config.post_object_max_file_size = 0;
    s3s_config.form_max_field_size = 4096;
    s3s_config.form_max_fields_size = 16 * 1024;
    s3s_config.form_max_parts = 16;
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        s3s_config,
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
    let app = App {
        s3: builder.build(),
        metrics: metrics.clone(),
        upstream,
        admin_elsewhere: config.admin_listen.is_some(),
        vhost,
        ready: Arc::default(),
        probe_bucket: config.credentials.iter().find_map(|c| match &c.buckets {
            crate::config::BucketScope::Only(names) => names.first().cloned(),
            crate::config::BucketScope::All => None,
        }),
    };
    let tls = config.tls.as_ref().map(tls_acceptor).transpose()?;
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
        tls,
        false,
        rx.clone(),
    ))];
    let mut admin_addr = None;
    if let Some(a) = config.admin_listen {
        let l = bind(a).await?;
        admin_addr = l.local_addr().ok();
        tasks.push(tokio::spawn(accept_loop(l, app, None, true, rx)));
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
    })
}

//! The store behind the gateway. Both kinds sit behind s3s's `S3` trait, so every
//! operation is written once: an S3 service reached with aws-sdk-s3 (`s3s_aws::Proxy`), or
//! a local directory served in-process (the embedded default, `local/`: no HTTP hop, and
//! reads large enough that the upstream is not the bottleneck of a quickstart).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::{
    BehaviorVersion, Builder, Credentials, Region, RequestChecksumCalculation,
    ResponseChecksumValidation, StalledStreamProtectionConfig,
};
use s3s::{S3, S3Request};

use crate::config::UpstreamConfig;
use crate::metrics::RetryTally;

mod counted;
mod local;
mod md5;
mod resume;
mod retries;
mod stall;
mod timeouts;

pub use local::LocalDir;
pub(crate) use resume::{Origin, resuming};

/// The upstream store.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<dyn S3>,
    /// Attempts the upstream client made beyond the first of each call (empty for a local
    /// directory, which is never retried).
    retries: RetryTally,
    /// How long a GET body may leave a wanted read waiting (`None` for a local directory,
    /// whose reads do not stall).
    body_stall: Option<Duration>,
}

/// Why the upstream could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The embedded store's directory could not be created or opened.
    #[error("data directory {path}: {message}")]
    DataDir {
        /// The directory.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The CA bundle could not be read or used.
    #[error("CA bundle: {0}")]
    CaBundle(String),
}

impl Upstream {
    /// Wraps any `S3` implementation as the upstream (tests use this for fault injection).
    #[must_use]
    pub fn from_s3(inner: Arc<dyn S3>) -> Self {
        Self {
            inner,
            retries: RetryTally::default(),
            body_stall: None,
        }
    }

    /// Builds the upstream a config names.
    ///
    /// # Errors
    /// [`UpstreamError`] when the directory or CA bundle cannot be used.
    pub async fn connect(config: &UpstreamConfig) -> Result<Self, UpstreamError> {
        match config {
            UpstreamConfig::Local { dir } => {
                let fail = |message: String| UpstreamError::DataDir {
                    path: dir.display().to_string(),
                    message,
                };
                std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
                let store = LocalDir::new(dir).map_err(|e| fail(e.to_string()))?;
                Ok(Self::from_s3(Arc::new(store)))
            }
            UpstreamConfig::S3 {
                url,
                region,
                path_style,
                ca_bundle,
                credentials,
                timeout,
            } => {
                let mut http = aws_smithy_http_client::Builder::new().tls_provider(
                    aws_smithy_http_client::tls::Provider::Rustls(
                        aws_smithy_http_client::tls::rustls_provider::CryptoMode::AwsLc,
                    ),
                );
                if let Some(path) = ca_bundle {
                    let pem = std::fs::read(path)
                        .map_err(|e| UpstreamError::CaBundle(format!("{}: {e}", path.display())))?;
                    let trust = aws_smithy_http_client::tls::TrustStore::default()
                        .with_pem_certificate(pem);
                    let tls = aws_smithy_http_client::tls::TlsContext::builder()
                        .with_trust_store(trust)
                        .build()
                        .map_err(|e| UpstreamError::CaBundle(e.to_string()))?;
                    http = http.tls_context(tls);
                }
                let http = http.build_https();
                let retries = RetryTally::default();
                let mut conf = Builder::new()
                    .behavior_version(BehaviorVersion::latest())
                    .endpoint_url(url)
                    .force_path_style(*path_style)
                    .region(Region::new(region.clone()))
                    // B2 rejects every x-amz-checksum-* header: send checksums only where S3
                    // requires them, and never ask for them on reads.
                    .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
                    .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
                    // An upstream that stops taking an upload's bytes is cut after the attempt
                    // limit. The SDK tells that from a client that sends slowly (its body is
                    // then what waits; `server/idle.rs` limits that wait), so a slow client
                    // is never cut here. GET bodies have their own guard (`stall.rs`).
                    .stalled_stream_protection(
                        StalledStreamProtectionConfig::enabled()
                            .upload_enabled(true)
                            .download_enabled(false)
                            .grace_period(*timeout)
                            .build(),
                    )
                    // Retries with exponential backoff on 5xx, throttling and transport
                    // errors; the SDK retries only requests whose body can be replayed, so a
                    // streaming upload is never sent twice (tests/it/retry.rs).
                    .retry_config(
                        aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(4),
                    )
                    .interceptor(retries::CountRetries(retries.clone()))
                    .interceptor(md5::Md5InsteadOfChecksums)
                    .interceptor(timeouts::LimitAttempts { limit: *timeout })
                    .http_client(http.clone());
                if let Some((ak, sk)) = credentials {
                    conf = conf.credentials_provider(Credentials::new(
                        ak,
                        sk.expose(),
                        None,
                        None,
                        "kura-config",
                    ));
                } else {
                    let shared = aws_config::defaults(BehaviorVersion::latest())
                        .region(Region::new(region.clone()))
                        .http_client(http)
                        .load()
                        .await;
                    if let Some(p) = shared.credentials_provider() {
                        conf = conf.credentials_provider(p);
                    }
                }
                let client = aws_sdk_s3::Client::from_conf(conf.build());
                Ok(Self {
                    inner: Arc::new(s3s_aws::Proxy::from(client)),
                    retries,
                    body_stall: Some(*timeout),
                })
            }
        }
    }

    /// This upstream with every call, and every retry of one, counted in `metrics`, and
    /// its GET bodies cut when they stall.
    #[must_use]
    pub fn counted(self, metrics: crate::metrics::Metrics) -> Self {
        metrics.upstream_retries_from(self.retries.clone());
        Self {
            inner: Arc::new(counted::Counted {
                inner: self.inner,
                metrics,
                body_stall: self.body_stall,
            }),
            retries: self.retries,
            body_stall: self.body_stall,
        }
    }

    /// The upstream's `S3` implementation.
    pub(crate) fn s3(&self) -> &dyn S3 {
        self.inner.as_ref()
    }
}

/// A request to the upstream: only the input matters; the gateway's own identity is the
/// same for every call (s3s-fs binds multipart uploads to the caller's access key).
pub(crate) fn request<T>(input: T) -> S3Request<T> {
    S3Request {
        input,
        method: http::Method::GET,
        uri: http::Uri::from_static("/"),
        headers: http::HeaderMap::new(),
        extensions: http::Extensions::new(),
        credentials: None,
        region: None,
        service: None,
        trailing_headers: None,
    }
}

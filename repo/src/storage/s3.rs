//! The repository's storage on S3 through a kura gateway (FORMAT.md section 2): one
//! attempt of each request here, retried by `retry.rs`.

use std::future::Future;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use kura_keys::secret::Secret;

use super::retry::{Attempt, DEFAULT_RETRY_FOR, Failure, Retrier, Retry, transient_answer};
use super::{FileType, Storage};
use crate::error::{RepoError, Result};

/// A repository at `s3://BUCKET/PREFIX/` behind a kura gateway.
#[derive(Clone)]
pub struct S3Storage {
    client: Client,
    bucket: String,
    prefix: String,
    /// Whether PUT bodies are hashed into the signature (see [`S3Storage::new`]).
    sign_payload: bool,
    /// How transient failures are retried.
    retry: Retrier,
}

/// Where a repository is and how to reach it.
#[derive(Clone)]
pub struct S3Location {
    /// The gateway's URL.
    pub endpoint: String,
    /// Bucket.
    pub bucket: String,
    /// Prefix inside the bucket, without leading or trailing `/` (may be empty).
    pub prefix: String,
    /// Gateway access key ID.
    pub access_key: String,
    /// Gateway secret (not logged: `Debug` leaves it out).
    pub secret_key: Secret,
}

impl std::fmt::Debug for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Location")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

impl S3Location {
    /// Parses `s3://BUCKET[/PREFIX]`; returns (bucket, prefix).
    ///
    /// # Errors
    /// [`RepoError::BadLocation`] when `repo` is not of that form.
    pub fn parse_repo(repo: &str) -> Result<(String, String)> {
        let rest = repo
            .strip_prefix("s3://")
            .ok_or_else(|| RepoError::BadLocation {
                location: repo.to_string(),
                why: "expected s3://BUCKET/PREFIX",
            })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(RepoError::BadLocation {
                location: repo.to_string(),
                why: "no bucket",
            });
        }
        Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
    }
}

impl S3Storage {
    /// A client for the repository at `loc`.
    #[must_use]
    pub fn new(loc: &S3Location) -> Self {
        let conf = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&loc.endpoint)
            .force_path_style(true)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(
                &loc.access_key,
                loc.secret_key.expose(),
                None,
                None,
                "kura",
            ))
            // Retries are this type's own (`retry.rs`): the SDK's give up after 3 attempts
            // in a few seconds, too soon for a gateway that restarts.
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .build(),
            )
            .build();
        Self {
            client: Client::from_conf(conf),
            bucket: loc.bucket.clone(),
            prefix: loc.prefix.clone(),
            sign_payload: !endpoint_is_protected(&loc.endpoint),
            retry: Retrier::new(DEFAULT_RETRY_FOR),
        }
    }

    /// Retries each request's transient failures (connection refused or reset, timeouts,
    /// HTTP 5xx, 429, SlowDown) for up to `bound` (0: never), with exponential backoff and
    /// jitter; [`DEFAULT_RETRY_FOR`] unless set. Until the gateway first answered, for at
    /// most 10 s of that.
    #[must_use]
    pub fn with_retry_for(mut self, bound: Duration) -> Self {
        self.retry.bound = bound;
        self
    }

    /// `attempt`, retried as `retry.rs` says.
    async fn retrying<T, F, Fut>(&self, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        self.retry.run(attempt).await.map(|(v, _)| v)
    }

    fn key(&self, ft: FileType, name: &str) -> String {
        if self.prefix.is_empty() {
            ft.path(name)
        } else {
            format!("{}/{}", self.prefix, ft.path(name))
        }
    }

    /// HeadObject of `key`: `None` when there is no such object.
    async fn head(
        &self,
        key: &str,
    ) -> Attempt<Option<aws_sdk_s3::operation::head_object::HeadObjectOutput>> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => Ok(Some(out)),
            Err(e)
                if e.as_service_error().is_some_and(
                    aws_sdk_s3::operation::head_object::HeadObjectError::is_not_found,
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(sdk_error("HeadObject", key, &e)),
        }
    }

    /// One PutObject; with `if_absent`, conditional on no object being there
    /// (`If-None-Match: *`). `Ok(false)` when that condition failed (412).
    async fn put_object(
        &self,
        ft: FileType,
        name: &str,
        data: Bytes,
        if_absent: bool,
    ) -> Attempt<bool> {
        let key = self.key(ft, name);
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .set_if_none_match(if_absent.then(|| "*".to_string()))
            .body(ByteStream::from(data))
            .customize();
        let put = if self.sign_payload {
            put
        } else {
            put.disable_payload_signing()
        };
        match put.send().await {
            Ok(_) => Ok(true),
            Err(e) if if_absent && e.raw_response().is_some_and(|r| r.status().as_u16() == 412) => {
                Ok(false)
            }
            Err(e) => Err(sdk_error("PutObject", &key, &e)),
        }
    }

    /// Creates the bucket if it does not exist (for `kura init`).
    ///
    /// # Errors
    /// When the gateway refuses both HEAD and CREATE of the bucket.
    pub async fn ensure_bucket(&self) -> Result<()> {
        self.retrying(|| async {
            if self
                .client
                .head_bucket()
                .bucket(&self.bucket)
                .send()
                .await
                .is_ok()
            {
                return Ok(());
            }
            self.client
                .create_bucket()
                .bucket(&self.bucket)
                .send()
                .await
                .map_err(|e| sdk_error("CreateBucket", &self.bucket, &e))?;
            Ok(())
        })
        .await
    }
}

/// The header with which a kura gateway marks an error answer that repeats however often
/// it is retried (`gateway/src/error.rs`): a stored object that failed authentication, or
/// one under a key the gateway lacks.
const PERMANENT_ERROR_HEADER: &str = "x-kura-error";

/// Whether the connection itself protects a PUT body, so that it need not be hashed into
/// the signature: TLS, or a loopback address (an in-process or sidecar gateway). As with
/// the AWS CLI, which signs payloads only over plain HTTP. Hashing costs a SHA-256 pass on
/// each side (16% of the CPU of a first backup through a local gateway); bodies keep their
/// CRC32 trailer either way, and the gateway authenticates what it stores regardless.
/// (The CLI also warns of a gateway's upstream that is not protected this way.)
#[must_use]
pub fn endpoint_is_protected(endpoint: &str) -> bool {
    if endpoint.starts_with("https://") {
        return true;
    }
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // `user:password@host`: the host is after the last `@`.
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One line for a failed SDK call: the S3 error code and message, or why the gateway could
/// not be reached; and whether trying again may help.
fn sdk_error<E>(
    op: &'static str,
    key: &str,
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Failure
where
    E: aws_sdk_s3::error::ProvideErrorMetadata,
{
    use aws_sdk_s3::error::SdkError;
    let (detail, retry) = match e {
        SdkError::ServiceError(s) => {
            let code = s.err().code().unwrap_or("error");
            let status = s.raw().status().as_u16();
            let hint = match code {
                "SignatureDoesNotMatch" | "InvalidAccessKeyId" => {
                    ": the gateway refused the credentials (check the access key ID and KURA_SECRET_ACCESS_KEY)"
                }
                "AccessDenied" => ": this access key may not use this bucket",
                _ => "",
            };
            // The gateway's word that the error repeats (a stored object that failed
            // authentication answers 500 too, and would be retried for minutes).
            let permanent = s.raw().headers().get(PERMANENT_ERROR_HEADER).is_some();
            let retry = if transient_answer(status, code, permanent) {
                Retry::Answered
            } else {
                Retry::Never
            };
            (
                format!(
                    "{code} {} (HTTP {status}){hint}",
                    s.err().message().unwrap_or("")
                ),
                retry,
            )
        }
        SdkError::DispatchFailure(d) if d.is_user() => (format!("{e}"), Retry::Never),
        // Connected, then closed before an answer: a gateway killed mid-request, or one
        // that found the stored object failing authentication before it sent a byte.
        SdkError::DispatchFailure(d)
            if !d.is_timeout() && !d.as_connector_error().is_some_and(|c| not_connected(c)) =>
        {
            (
                "the gateway closed the connection before it answered (it restarted, or the \
             stored object failed authentication)"
                    .into(),
                Retry::Cut,
            )
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => (
            "cannot reach the gateway (wrong --endpoint, or it is not running?)".into(),
            Retry::Unreached,
        ),
        SdkError::ResponseError(_) => (e.to_string(), Retry::Cut),
        other => (other.to_string(), Retry::Never),
    };
    Failure {
        error: RepoError::Storage {
            op,
            key: key.to_string(),
            detail,
        },
        retry,
    }
}

/// Whether a failed request never reached the gateway: the connection was refused, or
/// the address did not resolve, rather than closed after it was made.
fn not_connected(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind as K;
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                K::ConnectionRefused
                    | K::HostUnreachable
                    | K::NetworkUnreachable
                    | K::AddrNotAvailable
                    | K::TimedOut
            )
        {
            return true;
        }
        // hyper-util's connect errors name themselves (`tcp connect error`, `dns error`).
        let text = c.to_string();
        if text.contains("connect error") || text.contains("dns error") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A body that broke off while it was read: the gateway answered, and may again, or may
/// break off at the same place again (`Retry::Cut`).
fn cut_short(op: &'static str, key: &str, e: &impl std::fmt::Display) -> Failure {
    Failure {
        error: RepoError::Storage {
            op,
            key: key.to_string(),
            detail: e.to_string(),
        },
        retry: Retry::Cut,
    }
}

/// Single attempts of the requests that [`Storage`] retries.
impl S3Storage {
    async fn get_once(&self, key: &str) -> Attempt<Bytes> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                use aws_sdk_s3::error::ProvideErrorMetadata as _;
                // A repository in a bucket that does not exist is as missing as one that does.
                if e.as_service_error()
                    .is_some_and(|s| s.is_no_such_key() || s.code() == Some("NoSuchBucket"))
                {
                    Failure::from(RepoError::NotFound(key.to_string()))
                } else {
                    sdk_error("GetObject", key, &e)
                }
            })?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| cut_short("GetObject", key, &e))?;
        Ok(body.into_bytes())
    }

    async fn get_range_once(&self, key: &str, offset: u64, len: u64) -> Attempt<Bytes> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={offset}-{}", offset + len - 1))
            .send()
            .await
            .map_err(|e| sdk_error("GetObject", key, &e))?;
        // Into one buffer of the expected size as the pieces arrive: one copy (collecting
        // first and joining after is two).
        let mut body = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        let mut stream = out.body;
        while let Some(piece) = stream
            .try_next()
            .await
            .map_err(|e| cut_short("GetObject", key, &e))?
        {
            if (body.len() + piece.len()) as u64 > len {
                return Err(RepoError::corrupt(key, "range read returned too many bytes").into());
            }
            body.extend_from_slice(&piece);
        }
        let body = Bytes::from(body);
        if body.len() as u64 != len {
            return Err(RepoError::corrupt(
                key,
                format!("range read returned {} of {len} bytes", body.len()),
            )
            .into());
        }
        Ok(body)
    }

    async fn list_once(&self, prefix: &str) -> Attempt<Vec<(String, u64)>> {
        let mut out = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("ListObjectsV2", prefix, &e))?;
            for obj in page.contents() {
                let Some(key) = obj.key() else { continue };
                let name = key.rsplit('/').next().unwrap_or(key);
                out.push((
                    name.to_string(),
                    u64::try_from(obj.size().unwrap_or(0)).unwrap_or(0),
                ));
            }
        }
        Ok(out)
    }

    async fn delete_once(&self, key: &str) -> Attempt<()> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_error("DeleteObject", key, &e))?;
        Ok(())
    }
}

impl Storage for S3Storage {
    async fn put(&self, ft: FileType, name: &str, data: Bytes) -> Result<()> {
        self.retrying(|| self.put_object(ft, name, data.clone(), false))
            .await
            .map(drop)
    }

    async fn create(&self, ft: FileType, name: &str, data: Bytes) -> Result<bool> {
        let (created, retried) = self
            .retry
            .run(|| self.put_object(ft, name, data.clone(), true))
            .await?;
        if created || !retried {
            return Ok(created);
        }
        // An earlier attempt whose answer was lost may have stored the object: then it is
        // ours, byte for byte (what is created holds a random token or key), and this
        // writer won the race it would otherwise believe lost.
        let key = self.key(ft, name);
        match self.retrying(|| self.get_once(&key)).await {
            Ok(stored) => Ok(stored == data),
            Err(RepoError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn get(&self, ft: FileType, name: &str) -> Result<Bytes> {
        let key = self.key(ft, name);
        self.retrying(|| self.get_once(&key)).await
    }

    async fn get_range(&self, ft: FileType, name: &str, offset: u64, len: u64) -> Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let key = self.key(ft, name);
        self.retrying(|| self.get_range_once(&key, offset, len))
            .await
    }

    async fn exists(&self, ft: FileType, name: &str) -> Result<bool> {
        let key = self.key(ft, name);
        Ok(self.retrying(|| self.head(&key)).await?.is_some())
    }

    async fn list(&self, ft: FileType) -> Result<Vec<(String, u64)>> {
        let prefix = if self.prefix.is_empty() {
            ft.list_prefix().to_string()
        } else {
            format!("{}/{}", self.prefix, ft.list_prefix())
        };
        self.retrying(|| self.list_once(&prefix)).await
    }

    async fn modified(&self, ft: FileType, name: &str) -> Result<Option<i64>> {
        let key = self.key(ft, name);
        let head = self.retrying(|| self.head(&key)).await?;
        Ok(head.and_then(|h| {
            h.last_modified()
                .map(aws_sdk_s3::primitives::DateTime::secs)
        }))
    }

    async fn delete(&self, ft: FileType, name: &str) -> Result<()> {
        let key = self.key(ft, name);
        self.retrying(|| self.delete_once(&key)).await
    }
}

#[cfg(test)]
mod tests {
    use super::{S3Location, endpoint_is_protected};

    #[test]
    fn payloads_go_unsigned_only_over_tls_or_loopback() {
        for protected in [
            "https://gateway.example:9000",
            "http://127.0.0.1:9000",
            "http://127.8.9.10",
            "http://localhost:9000/",
            "http://[::1]:9000",
        ] {
            assert!(endpoint_is_protected(protected), "{protected}");
        }
        for exposed in [
            "http://10.0.0.5:9000",
            "http://gateway.kura.svc:9000",
            "http://[fe80::1]:9000",
            "http://localhost.example.com",
            "ftp://127.0.0.1",
            "http://localhost:1@remote.example:9000",
            "http://127.0.0.1@10.0.0.5",
        ] {
            assert!(!endpoint_is_protected(exposed), "{exposed}");
        }
    }

    #[test]
    fn a_location_printed_for_debugging_shows_no_secret() {
        let loc = S3Location {
            endpoint: "http://127.0.0.1:9000".into(),
            bucket: "b".into(),
            prefix: "p".into(),
            access_key: "ak".into(),
            secret_key: "wJalrXUtnFEMIK7MDENG".into(),
        };
        let shown = format!("{loc:?}");
        assert!(!shown.contains("wJalrXUtnFEMIK7MDENG"), "{shown}");
        assert!(shown.contains("ak"), "{shown}");
    }
}

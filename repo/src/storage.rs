//! Where repository objects are stored: a small trait keyed by (file type, name), and its
//! one implementation, S3 through a kura gateway (FORMAT.md section 2).

use std::future::Future;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;

use crate::error::{RepoError, Result};

/// The kinds of repository objects, each under its own name prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    /// `config`.
    Config,
    /// `data/XX/ID`: packs.
    Pack,
    /// `index/ID`.
    Index,
    /// `snapshots/ID`.
    Snapshot,
    /// `prune/ID`: packs marked for deletion (FORMAT.md section 9).
    PruneMark,
    /// `lease/N`: the upkeep lease of generation N (FORMAT.md section 9.1).
    Lease,
    /// `session/TOKEN`: a running backup's session (FORMAT.md section 9.2).
    Session,
}

impl FileType {
    /// The object name of `name` (an ID in hex; ignored for `Config`), relative to the
    /// repository prefix.
    #[must_use]
    pub fn path(self, name: &str) -> String {
        match self {
            Self::Config => "config".into(),
            Self::Pack => format!("data/{}/{name}", name.get(..2).unwrap_or("00")),
            Self::Index => format!("index/{name}"),
            Self::Snapshot => format!("snapshots/{name}"),
            Self::PruneMark => format!("prune/{name}"),
            Self::Lease => format!("lease/{name}"),
            Self::Session => format!("session/{name}"),
        }
    }

    fn list_prefix(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Pack => "data/",
            Self::Index => "index/",
            Self::Snapshot => "snapshots/",
            Self::PruneMark => "prune/",
            Self::Lease => "lease/",
            Self::Session => "session/",
        }
    }
}

/// Object storage for one repository. Objects are small (config, index, snapshots) or
/// bounded by the pack size, so whole-object calls take and return `Bytes`.
pub trait Storage: Send + Sync + 'static {
    /// Stores an object (replacing none: every name but `config` is content-addressed).
    fn put(&self, ft: FileType, name: &str, data: Bytes)
    -> impl Future<Output = Result<()>> + Send;
    /// Stores an object only if none is there under that name (`If-None-Match: *`), in one
    /// request, so that of two writers racing for a name exactly one wins. `Ok(false)`
    /// when an object was already there; nothing is written then.
    fn create(
        &self,
        ft: FileType,
        name: &str,
        data: Bytes,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Reads a whole object.
    fn get(&self, ft: FileType, name: &str) -> impl Future<Output = Result<Bytes>> + Send;
    /// Reads `len` bytes at `offset`.
    fn get_range(
        &self,
        ft: FileType,
        name: &str,
        offset: u64,
        len: u64,
    ) -> impl Future<Output = Result<Bytes>> + Send;
    /// Whether an object exists.
    fn exists(&self, ft: FileType, name: &str) -> impl Future<Output = Result<bool>> + Send;
    /// Names (IDs in hex) and sizes of all objects of a type.
    fn list(&self, ft: FileType) -> impl Future<Output = Result<Vec<(String, u64)>>> + Send;
    /// Deletes an object.
    fn delete(&self, ft: FileType, name: &str) -> impl Future<Output = Result<()>> + Send;
    /// When an object was last written (seconds since the Unix epoch), if it exists.
    fn modified(
        &self,
        ft: FileType,
        name: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
}

/// A repository at `s3://BUCKET/PREFIX/` behind a kura gateway.
#[derive(Clone)]
pub struct S3Storage {
    client: Client,
    bucket: String,
    prefix: String,
    /// Whether PUT bodies are hashed into the signature (see [`S3Storage::new`]).
    sign_payload: bool,
}

/// Where a repository is and how to reach it.
#[derive(Clone, Debug)]
pub struct S3Location {
    /// The gateway's URL.
    pub endpoint: String,
    /// Bucket.
    pub bucket: String,
    /// Prefix inside the bucket, without leading or trailing `/` (may be empty).
    pub prefix: String,
    /// Gateway access key ID.
    pub access_key: String,
    /// Gateway secret (not logged).
    pub secret_key: String,
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
                &loc.secret_key,
                None,
                None,
                "kura",
            ))
            .build();
        Self {
            client: Client::from_conf(conf),
            bucket: loc.bucket.clone(),
            prefix: loc.prefix.clone(),
            sign_payload: !payload_is_protected(&loc.endpoint),
        }
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
    ) -> Result<Option<aws_sdk_s3::operation::head_object::HeadObjectOutput>> {
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
    ) -> Result<bool> {
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
    }
}

/// Whether the connection itself protects a PUT body, so that it need not be hashed into
/// the signature: TLS, or a loopback address (an in-process or sidecar gateway). As with
/// the AWS CLI, which signs payloads only over plain HTTP. Hashing costs a SHA-256 pass on
/// each side (16% of the CPU of a first backup through a local gateway); bodies keep their
/// CRC32 trailer either way, and the gateway authenticates what it stores regardless.
fn payload_is_protected(endpoint: &str) -> bool {
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
/// not be reached.
fn sdk_error<E>(
    op: &'static str,
    key: &str,
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> RepoError
where
    E: aws_sdk_s3::error::ProvideErrorMetadata,
{
    use aws_sdk_s3::error::SdkError;
    let detail = match e {
        SdkError::ServiceError(s) => {
            let code = s.err().code().unwrap_or("error");
            let hint = match code {
                "SignatureDoesNotMatch" | "InvalidAccessKeyId" => {
                    ": the gateway refused the credentials (check the access key ID and KURA_SECRET_ACCESS_KEY)"
                }
                "AccessDenied" => ": this access key may not use this bucket",
                _ => "",
            };
            format!(
                "{code} {} (HTTP {}){hint}",
                s.err().message().unwrap_or(""),
                s.raw().status().as_u16()
            )
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => {
            "cannot reach the gateway (wrong --endpoint, or it is not running?)".into()
        }
        other => other.to_string(),
    };
    RepoError::Storage {
        op,
        key: key.to_string(),
        detail,
    }
}

impl Storage for S3Storage {
    async fn put(&self, ft: FileType, name: &str, data: Bytes) -> Result<()> {
        self.put_object(ft, name, data, false).await.map(drop)
    }

    async fn create(&self, ft: FileType, name: &str, data: Bytes) -> Result<bool> {
        self.put_object(ft, name, data, true).await
    }

    async fn get(&self, ft: FileType, name: &str) -> Result<Bytes> {
        let key = self.key(ft, name);
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| {
                use aws_sdk_s3::error::ProvideErrorMetadata as _;
                // A repository in a bucket that does not exist is as missing as one that does.
                if e.as_service_error()
                    .is_some_and(|s| s.is_no_such_key() || s.code() == Some("NoSuchBucket"))
                {
                    RepoError::NotFound(key.clone())
                } else {
                    sdk_error("GetObject", &key, &e)
                }
            })?;
        let body = out.body.collect().await.map_err(|e| RepoError::Storage {
            op: "GetObject",
            key: key.clone(),
            detail: e.to_string(),
        })?;
        Ok(body.into_bytes())
    }

    async fn get_range(&self, ft: FileType, name: &str, offset: u64, len: u64) -> Result<Bytes> {
        let key = self.key(ft, name);
        if len == 0 {
            return Ok(Bytes::new());
        }
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&key)
            .range(format!("bytes={offset}-{}", offset + len - 1))
            .send()
            .await
            .map_err(|e| sdk_error("GetObject", &key, &e))?;
        // Into one buffer of the expected size as the pieces arrive: one copy (collecting
        // first and joining after is two).
        let mut body = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        let mut stream = out.body;
        while let Some(piece) = stream.try_next().await.map_err(|e| RepoError::Storage {
            op: "GetObject",
            key: key.clone(),
            detail: e.to_string(),
        })? {
            if (body.len() + piece.len()) as u64 > len {
                return Err(RepoError::corrupt(
                    key,
                    "range read returned too many bytes",
                ));
            }
            body.extend_from_slice(&piece);
        }
        let body = Bytes::from(body);
        if body.len() as u64 != len {
            return Err(RepoError::corrupt(
                key,
                format!("range read returned {} of {len} bytes", body.len()),
            ));
        }
        Ok(body)
    }

    async fn exists(&self, ft: FileType, name: &str) -> Result<bool> {
        Ok(self.head(&self.key(ft, name)).await?.is_some())
    }

    async fn list(&self, ft: FileType) -> Result<Vec<(String, u64)>> {
        let prefix = if self.prefix.is_empty() {
            ft.list_prefix().to_string()
        } else {
            format!("{}/{}", self.prefix, ft.list_prefix())
        };
        let mut out = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("ListObjectsV2", &prefix, &e))?;
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

    async fn modified(&self, ft: FileType, name: &str) -> Result<Option<i64>> {
        let head = self.head(&self.key(ft, name)).await?;
        Ok(head.and_then(|h| {
            h.last_modified()
                .map(aws_sdk_s3::primitives::DateTime::secs)
        }))
    }

    async fn delete(&self, ft: FileType, name: &str) -> Result<()> {
        let key = self.key(ft, name);
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| sdk_error("DeleteObject", &key, &e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::payload_is_protected;

    #[test]
    fn payloads_go_unsigned_only_over_tls_or_loopback() {
        for protected in [
            "https://gateway.example:9000",
            "http://127.0.0.1:9000",
            "http://127.8.9.10",
            "http://localhost:9000/",
            "http://[::1]:9000",
        ] {
            assert!(payload_is_protected(protected), "{protected}");
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
            assert!(!payload_is_protected(exposed), "{exposed}");
        }
    }
}

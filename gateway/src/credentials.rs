//! Client credentials: which secret signs for which access key (`S3Auth`), and which
//! buckets each key may touch (`S3Access`). An access key sees and touches only its
//! buckets: anything else is `AccessDenied`, and `ListBuckets` is filtered.

use std::collections::HashMap;
use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::{CopyObjectInput, CopySource, UploadPartCopyInput};
use s3s::{S3Request, S3Result, s3_error};

use crate::config::{BucketScope, ClientCredential};

/// The client credentials, shared by the auth and access checks.
#[derive(Clone)]
pub struct Credentials {
    keys: Arc<HashMap<String, ClientCredential>>,
}

impl Credentials {
    /// Indexes the configured credentials by access key.
    #[must_use]
    pub fn new(list: Vec<ClientCredential>) -> Self {
        Self {
            keys: Arc::new(
                list.into_iter()
                    .map(|c| (c.access_key.clone(), c))
                    .collect(),
            ),
        }
    }

    /// The bucket scope of an access key, if it exists.
    #[must_use]
    pub fn scope(&self, access_key: &str) -> Option<&BucketScope> {
        self.keys.get(access_key).map(|c| &c.buckets)
    }

    fn check_bucket(&self, access_key: Option<&str>, bucket: &str) -> S3Result<()> {
        match access_key.and_then(|k| self.scope(k)) {
            Some(scope) if scope.allows(bucket) => Ok(()),
            _ => Err(s3_error!(
                AccessDenied,
                "this access key may not use bucket {bucket}"
            )),
        }
    }
}

#[async_trait::async_trait]
impl S3Auth for Credentials {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.keys.get(access_key) {
            Some(c) => Ok(c.secret.clone()),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "the access key ID does not exist"
            )),
        }
    }
}

fn copy_source_bucket(source: &CopySource) -> Option<&str> {
    match source {
        CopySource::Bucket { bucket, .. } => Some(bucket),
        _ => None,
    }
}

#[async_trait::async_trait]
impl S3Access for Credentials {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(creds) = cx.credentials() else {
            return Err(s3_error!(AccessDenied, "anonymous access is not allowed"));
        };
        // SigV2 is accepted by s3s without a clock check; kura takes SigV4 only.
        let v2_header = cx
            .headers()
            .get(http::header::AUTHORIZATION)
            .is_some_and(|v| v.as_bytes().starts_with(b"AWS "));
        let v2_query = cx
            .uri()
            .query()
            .is_some_and(|q| q.contains("AWSAccessKeyId="));
        if v2_header || v2_query {
            return Err(s3_error!(
                AccessDenied,
                "signature version 2 is not accepted; use SigV4"
            ));
        }
        let access_key = creds.access_key.clone();
        match cx.s3_path().get_bucket_name() {
            Some(bucket) => self.check_bucket(Some(&access_key), bucket),
            None if self.keys.contains_key(&access_key) => Ok(()),
            None => Err(s3_error!(InvalidAccessKeyId)),
        }
    }

    async fn copy_object(&self, req: &mut S3Request<CopyObjectInput>) -> S3Result<()> {
        let key = req.credentials.as_ref().map(|c| c.access_key.as_str());
        match copy_source_bucket(&req.input.copy_source) {
            Some(b) => self.check_bucket(key, b),
            None => Err(s3_error!(
                NotImplemented,
                "access point copy sources are not supported"
            )),
        }
    }

    async fn upload_part_copy(&self, req: &mut S3Request<UploadPartCopyInput>) -> S3Result<()> {
        let key = req.credentials.as_ref().map(|c| c.access_key.as_str());
        match copy_source_bucket(&req.input.copy_source) {
            Some(b) => self.check_bucket(key, b),
            None => Err(s3_error!(
                NotImplemented,
                "access point copy sources are not supported"
            )),
        }
    }
}

//! Client credentials: which secret signs for which access key (`S3Auth`), and which
//! buckets each key may touch (`S3Access`). An access key sees and touches only its
//! buckets: anything else is `AccessDenied`, and `ListBuckets` is filtered.

use std::collections::HashMap;
use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::{
    CopyObjectInput, CopySource, CreateBucketInput, CreateMultipartUploadInput, DeleteObjectInput,
    DeleteObjectTaggingInput, DeleteObjectsInput, PutBucketVersioningInput, PutObjectInput,
    PutObjectLegalHoldInput, PutObjectRetentionInput, PutObjectTaggingInput, UploadPartCopyInput,
    UploadPartInput,
};
use s3s::{S3Request, S3Result, s3_error};

use crate::config::{BucketScope, ClientCredential};
use crate::error::CredentialsError;
use crate::powers::{Power, Powers, check_object_fields, refuse_sse_c};

/// The client credentials, shared by the auth and access checks.
#[derive(Clone)]
pub struct Credentials {
    keys: Arc<HashMap<String, ClientCredential>>,
}

/// The longest validity S3 accepts for a presigned URL (`X-Amz-Expires`): seven days.
pub const PRESIGNED_MAX_EXPIRES_SECS: u64 = 7 * 24 * 60 * 60;

impl Credentials {
    /// Indexes the configured credentials by access key.
    ///
    /// # Errors
    /// [`CredentialsError`], naming the access key (never a secret), when an access key ID
    /// is empty or given twice (one entry would silently widen or narrow the other's
    /// buckets), or its secret is empty (anyone who knows the ID could sign).
    pub fn new(list: Vec<ClientCredential>) -> Result<Self, CredentialsError> {
        let mut keys = HashMap::with_capacity(list.len());
        for c in list {
            if c.access_key.is_empty() {
                return Err(CredentialsError::EmptyAccessKey);
            }
            if c.secret.expose().is_empty() {
                return Err(CredentialsError::EmptySecret {
                    access_key: c.access_key,
                });
            }
            if keys.contains_key(&c.access_key) {
                return Err(CredentialsError::Repeated {
                    access_key: c.access_key,
                });
            }
            keys.insert(c.access_key.clone(), c);
        }
        Ok(Self {
            keys: Arc::new(keys),
        })
    }

    /// The bucket scope of an access key, if it exists.
    #[must_use]
    pub fn scope(&self, access_key: &str) -> Option<&BucketScope> {
        self.keys.get(access_key).map(|c| &c.buckets)
    }

    /// The powers of the access key that signed `req` (none for an unknown one, which
    /// the access check has refused already).
    fn powers<T>(&self, req: &S3Request<T>) -> &Powers {
        static NONE: std::sync::LazyLock<Powers> = std::sync::LazyLock::new(Powers::default);
        req.credentials
            .as_ref()
            .and_then(|c| self.keys.get(&c.access_key))
            .map_or(&NONE, |c| &c.powers)
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

/// The value of query parameter `name`, with the names percent-decoded as s3s decodes
/// them (so `AWSAccessKey%49d` is `AWSAccessKeyId`).
fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        (decode(k) == name).then(|| decode(v))
    })
}

fn query_has(query: &str, name: &str) -> bool {
    query_value(query, name).is_some()
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
        let query = cx.uri().query().unwrap_or("");
        if v2_header || query_has(query, "AWSAccessKeyId") {
            return Err(s3_error!(
                AccessDenied,
                "signature version 2 is not accepted; use SigV4"
            ));
        }
        // s3s takes any X-Amz-Expires; S3 refuses more than seven days.
        if let Some(expires) = query_value(query, "X-Amz-Expires")
            && expires
                .parse::<u64>()
                .map_or(true, |n| n > PRESIGNED_MAX_EXPIRES_SECS)
        {
            return Err(s3_error!(
                AuthorizationQueryParametersError,
                "X-Amz-Expires must be less than a week (in seconds) that is 604800"
            ));
        }
        // s3s reads a POST form's whole file into memory; no client kura serves uses it.
        if cx.s3_op().name() == "PostObject" {
            return Err(s3_error!(
                NotImplemented,
                "POST form uploads are not supported; use PUT"
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
            Some(b) => self.check_bucket(key, b)?,
            None => {
                return Err(s3_error!(
                    NotImplemented,
                    "access point copy sources are not supported"
                ));
            }
        }
        let powers = self.powers(req).clone();
        refuse_sse_c(req.input.copy_source_sse_customer_algorithm.is_some())?;
        check_object_fields!(&powers, &mut req.input)
    }

    // Client powers (`powers.rs`): checked before any handler runs.

    async fn create_bucket(&self, req: &mut S3Request<CreateBucketInput>) -> S3Result<()> {
        let powers = self.powers(req).clone();
        powers.bucket_canned_acl(&mut req.input.acl)?;
        let i = &req.input;
        let grants = i.grant_full_control.is_some()
            || i.grant_read.is_some()
            || i.grant_read_acp.is_some()
            || i.grant_write.is_some()
            || i.grant_write_acp.is_some();
        powers.require(Power::Acl, grants)
    }

    async fn put_object(&self, req: &mut S3Request<PutObjectInput>) -> S3Result<()> {
        let powers = self.powers(req).clone();
        check_object_fields!(&powers, &mut req.input)
    }

    async fn create_multipart_upload(
        &self,
        req: &mut S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<()> {
        let powers = self.powers(req).clone();
        check_object_fields!(&powers, &mut req.input)
    }

    async fn upload_part(&self, req: &mut S3Request<UploadPartInput>) -> S3Result<()> {
        refuse_sse_c(req.input.sse_customer_algorithm.is_some())
    }

    async fn delete_object(&self, req: &mut S3Request<DeleteObjectInput>) -> S3Result<()> {
        let used = req.input.bypass_governance_retention.unwrap_or(false);
        self.powers(req).require(Power::BypassGovernance, used)?;
        // `false` says nothing: not forwarded either.
        req.input.bypass_governance_retention = used.then_some(true);
        Ok(())
    }

    async fn delete_objects(&self, req: &mut S3Request<DeleteObjectsInput>) -> S3Result<()> {
        let used = req.input.bypass_governance_retention.unwrap_or(false);
        self.powers(req).require(Power::BypassGovernance, used)?;
        req.input.bypass_governance_retention = used.then_some(true);
        Ok(())
    }

    async fn put_object_retention(
        &self,
        req: &mut S3Request<PutObjectRetentionInput>,
    ) -> S3Result<()> {
        let powers = self.powers(req);
        powers.require(Power::Retention, true)?;
        let bypass = req.input.bypass_governance_retention.unwrap_or(false);
        powers.require(Power::BypassGovernance, bypass)
    }

    async fn put_object_legal_hold(
        &self,
        req: &mut S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<()> {
        self.powers(req).require(Power::LegalHold, true)
    }

    async fn put_bucket_versioning(
        &self,
        req: &mut S3Request<PutBucketVersioningInput>,
    ) -> S3Result<()> {
        self.powers(req).require(Power::BucketVersioning, true)
    }

    async fn put_object_tagging(&self, req: &mut S3Request<PutObjectTaggingInput>) -> S3Result<()> {
        self.powers(req).require(Power::TagsInClear, true)
    }

    async fn delete_object_tagging(
        &self,
        req: &mut S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<()> {
        self.powers(req).require(Power::TagsInClear, true)
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

//! Every upstream call counted in the metrics, with its error code when it fails; the one
//! place where an upstream's deferred CompleteMultipartUpload result (s3s-fs returns it in
//! `future`) is awaited, so no caller has to know; the one place where an error gets an
//! error status even when the upstream's answer was a success that could not be read; and
//! the one place where every GET body gets its stall guard (`stall.rs`).

#![allow(clippy::wildcard_imports, reason = "the S3 DTO namespace")]

use std::sync::Arc;
use std::time::Duration;

use s3s::dto::*;
use s3s::{S3, S3Error, S3Request, S3Response, S3Result};

use crate::metrics::Metrics;

/// An upstream whose calls are counted.
pub(crate) struct Counted {
    pub(crate) inner: Arc<dyn S3>,
    pub(crate) metrics: Metrics,
    /// The longest a GET body may leave a wanted read waiting, if limited.
    pub(crate) body_stall: Option<Duration>,
}

impl Counted {
    /// Counts a failed call, and makes sure its error carries an error status.
    fn failed(&self, op: &str, e: &mut S3Error) {
        // s3s-aws gives an error the status of the upstream's answer. When aws-sdk-s3 could
        // not parse a 200 (a service that names an XML root differently, say), that is a
        // 200 with an error body, which a client would take for success. (An error without
        // a status gets its code's own from s3s.)
        if e.status_code()
            .is_some_and(|s| s.is_success() || s.is_informational())
        {
            e.set_status_code(http::StatusCode::INTERNAL_SERVER_ERROR);
        }
        self.metrics.upstream_error(op, e.code().as_str());
    }

    async fn complete(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let mut resp = self.inner.complete_multipart_upload(req).await?;
        if let Some(fut) = resp.output.future.take() {
            resp.output = fut.await?;
        }
        Ok(resp)
    }
}

macro_rules! counted {
    ($($name:ident: $input:ty => $output:ty = $op:literal;)*) => {
        #[async_trait::async_trait]
        impl S3 for Counted {
            async fn complete_multipart_upload(&self, req: S3Request<CompleteMultipartUploadInput>) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
                self.metrics.upstream_request("CompleteMultipartUpload");
                let mut r = self.complete(req).await;
                if let Err(e) = &mut r {
                    self.failed("CompleteMultipartUpload", e);
                }
                r
            }

            async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
                self.metrics.upstream_request("GetObject");
                let mut r = self.inner.get_object(req).await;
                match &mut r {
                    Err(e) => self.failed("GetObject", e),
                    Ok(resp) => {
                        if let Some(limit) = self.body_stall {
                            let body = resp.output.body.take();
                            resp.output.body = body.map(|b| super::stall::guard(b, limit, self.metrics.clone()));
                        }
                    }
                }
                r
            }

            $(
                async fn $name(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    self.metrics.upstream_request($op);
                    let mut r = self.inner.$name(req).await;
                    if let Err(e) = &mut r {
                        self.failed($op, e);
                    }
                    r
                }
            )*
        }
    };
}

counted! {
    put_object: PutObjectInput => PutObjectOutput = "PutObject";
    head_object: HeadObjectInput => HeadObjectOutput = "HeadObject";
    delete_object: DeleteObjectInput => DeleteObjectOutput = "DeleteObject";
    delete_objects: DeleteObjectsInput => DeleteObjectsOutput = "DeleteObjects";
    list_objects: ListObjectsInput => ListObjectsOutput = "ListObjects";
    list_objects_v2: ListObjectsV2Input => ListObjectsV2Output = "ListObjectsV2";
    list_object_versions: ListObjectVersionsInput => ListObjectVersionsOutput = "ListObjectVersions";
    copy_object: CopyObjectInput => CopyObjectOutput = "CopyObject";
    create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput = "CreateMultipartUpload";
    upload_part: UploadPartInput => UploadPartOutput = "UploadPart";
    upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput = "UploadPartCopy";
    abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput = "AbortMultipartUpload";
    list_parts: ListPartsInput => ListPartsOutput = "ListParts";
    list_multipart_uploads: ListMultipartUploadsInput => ListMultipartUploadsOutput = "ListMultipartUploads";
    list_buckets: ListBucketsInput => ListBucketsOutput = "ListBuckets";
    create_bucket: CreateBucketInput => CreateBucketOutput = "CreateBucket";
    head_bucket: HeadBucketInput => HeadBucketOutput = "HeadBucket";
    delete_bucket: DeleteBucketInput => DeleteBucketOutput = "DeleteBucket";
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput = "GetBucketLocation";
    get_bucket_versioning: GetBucketVersioningInput => GetBucketVersioningOutput = "GetBucketVersioning";
    put_object_retention: PutObjectRetentionInput => PutObjectRetentionOutput = "PutObjectRetention";
    get_object_retention: GetObjectRetentionInput => GetObjectRetentionOutput = "GetObjectRetention";
    put_object_legal_hold: PutObjectLegalHoldInput => PutObjectLegalHoldOutput = "PutObjectLegalHold";
    get_object_legal_hold: GetObjectLegalHoldInput => GetObjectLegalHoldOutput = "GetObjectLegalHold";
    get_object_lock_configuration: GetObjectLockConfigurationInput => GetObjectLockConfigurationOutput = "GetObjectLockConfiguration";
    put_bucket_versioning: PutBucketVersioningInput => PutBucketVersioningOutput = "PutBucketVersioning";
    get_object_tagging: GetObjectTaggingInput => GetObjectTaggingOutput = "GetObjectTagging";
    put_object_tagging: PutObjectTaggingInput => PutObjectTaggingOutput = "PutObjectTagging";
    delete_object_tagging: DeleteObjectTaggingInput => DeleteObjectTaggingOutput = "DeleteObjectTagging";
    get_object_acl: GetObjectAclInput => GetObjectAclOutput = "GetObjectAcl";
}

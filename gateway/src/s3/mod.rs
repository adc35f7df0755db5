//! `impl S3 for Gateway`: a thin table from each S3 operation to the file of its family
//! (as Garage's `api/s3/`), each call counted in the metrics.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

mod bucket;
mod complete;
mod conditions;
mod copy;
mod delete;
mod get;
mod list;
mod multipart;
mod object_key;
mod object_lock;
mod own_upload;
mod put;
mod upload;

use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result};

use crate::gateway::Gateway;
use crate::metrics::OperationSlot;

/// The status an answer must have where s3s would give another: s3s 0.14 ignores
/// `S3Response::status`, but passes the response's extensions on, and the server applies
/// this one (a HEAD with a Range is 206).
#[derive(Clone, Copy)]
pub(crate) struct Status(pub(crate) http::StatusCode);

impl Gateway {
    async fn counted<T>(
        &self,
        op: &str,
        fut: impl std::future::Future<Output = S3Result<T>>,
    ) -> S3Result<T> {
        let r = fut.await;
        self.metrics
            .operation(op, r.as_ref().err().map(|e| e.code().as_str()));
        match &r {
            // A 5xx is the gateway's (or the upstream's) failure, never the client's: its
            // cause goes to the log, which is the only place the operator can see it.
            Err(e) if e.status_code().is_none_or(|s| s.is_server_error()) => {
                tracing::warn!(
                    operation = op,
                    code = e.code().as_str(),
                    message = e.message().unwrap_or(""),
                    source = e.source().map(ToString::to_string).unwrap_or_default(),
                    "operation failed on the gateway's side"
                );
            }
            Err(e) => tracing::debug!(
                operation = op,
                code = e.code().as_str(),
                message = e.message().unwrap_or(""),
                "operation failed"
            ),
            Ok(_) => {}
        }
        r
    }
}

macro_rules! ops {
    ($($name:ident: $input:ty => $output:ty = $op:literal, $imp:path;)*) => {
        #[async_trait::async_trait]
        impl S3 for Gateway {
            $(
                async fn $name(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    if let Some(slot) = req.extensions.get::<OperationSlot>() {
                        slot.set($op);
                    }
                    self.counted($op, $imp(self, req)).await
                }
            )*
        }
    };
}

ops! {
    put_object: PutObjectInput => PutObjectOutput = "PutObject", put::put_object;
    get_object: GetObjectInput => GetObjectOutput = "GetObject", get::get_object;
    head_object: HeadObjectInput => HeadObjectOutput = "HeadObject", get::head_object;
    delete_object: DeleteObjectInput => DeleteObjectOutput = "DeleteObject", delete::delete_object;
    delete_objects: DeleteObjectsInput => DeleteObjectsOutput = "DeleteObjects", delete::delete_objects;
    list_objects: ListObjectsInput => ListObjectsOutput = "ListObjects", list::list_objects;
    list_objects_v2: ListObjectsV2Input => ListObjectsV2Output = "ListObjectsV2", list::list_objects_v2;
    list_object_versions: ListObjectVersionsInput => ListObjectVersionsOutput = "ListObjectVersions", list::list_object_versions;
    copy_object: CopyObjectInput => CopyObjectOutput = "CopyObject", copy::copy_object;
    create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput = "CreateMultipartUpload", multipart::create;
    upload_part: UploadPartInput => UploadPartOutput = "UploadPart", multipart::upload_part;
    upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput = "UploadPartCopy", copy::upload_part_copy;
    complete_multipart_upload: CompleteMultipartUploadInput => CompleteMultipartUploadOutput = "CompleteMultipartUpload", complete::complete;
    abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput = "AbortMultipartUpload", multipart::abort;
    list_parts: ListPartsInput => ListPartsOutput = "ListParts", multipart::list_parts;
    list_multipart_uploads: ListMultipartUploadsInput => ListMultipartUploadsOutput = "ListMultipartUploads", multipart::list_uploads;
    list_buckets: ListBucketsInput => ListBucketsOutput = "ListBuckets", bucket::list_buckets;
    create_bucket: CreateBucketInput => CreateBucketOutput = "CreateBucket", bucket::create_bucket;
    head_bucket: HeadBucketInput => HeadBucketOutput = "HeadBucket", bucket::head_bucket;
    delete_bucket: DeleteBucketInput => DeleteBucketOutput = "DeleteBucket", bucket::delete_bucket;
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput = "GetBucketLocation", bucket::get_bucket_location;
    get_bucket_versioning: GetBucketVersioningInput => GetBucketVersioningOutput = "GetBucketVersioning", bucket::get_bucket_versioning;
    put_object_retention: PutObjectRetentionInput => PutObjectRetentionOutput = "PutObjectRetention", bucket::put_object_retention;
    get_object_retention: GetObjectRetentionInput => GetObjectRetentionOutput = "GetObjectRetention", bucket::get_object_retention;
    put_object_legal_hold: PutObjectLegalHoldInput => PutObjectLegalHoldOutput = "PutObjectLegalHold", bucket::put_object_legal_hold;
    get_object_legal_hold: GetObjectLegalHoldInput => GetObjectLegalHoldOutput = "GetObjectLegalHold", bucket::get_object_legal_hold;
    get_object_lock_configuration: GetObjectLockConfigurationInput => GetObjectLockConfigurationOutput = "GetObjectLockConfiguration", bucket::get_object_lock_configuration;
    put_bucket_versioning: PutBucketVersioningInput => PutBucketVersioningOutput = "PutBucketVersioning", bucket::put_bucket_versioning;
    get_object_tagging: GetObjectTaggingInput => GetObjectTaggingOutput = "GetObjectTagging", bucket::get_object_tagging;
    put_object_tagging: PutObjectTaggingInput => PutObjectTaggingOutput = "PutObjectTagging", bucket::put_object_tagging;
    delete_object_tagging: DeleteObjectTaggingInput => DeleteObjectTaggingOutput = "DeleteObjectTagging", bucket::delete_object_tagging;
    get_object_acl: GetObjectAclInput => GetObjectAclOutput = "GetObjectAcl", bucket::get_object_acl;
}

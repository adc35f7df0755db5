//! Calls that carry no object bodies: bucket operations, Object Lock, versioning, tags and
//! ACL reads, passed through to the upstream as they are (only ListBuckets is filtered by
//! the caller's buckets). Those that act with the gateway's identity need a power
//! (`powers.rs`, checked in `credentials.rs`): tags are stored in the clear, and suspending
//! versioning lets later writes replace what versions would keep.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::gateway::Gateway;
use crate::upstream::request;

macro_rules! passthrough {
    ($($name:ident: $input:ty => $output:ty;)*) => {
        $(
            pub(super) async fn $name(gw: &Gateway, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                let out = gw.upstream.s3().$name(request(req.input)).await?;
                Ok(S3Response::new(out.output))
            }
        )*
    };
}

passthrough! {
    create_bucket: CreateBucketInput => CreateBucketOutput;
    head_bucket: HeadBucketInput => HeadBucketOutput;
    delete_bucket: DeleteBucketInput => DeleteBucketOutput;
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput;
    get_bucket_versioning: GetBucketVersioningInput => GetBucketVersioningOutput;
    put_object_retention: PutObjectRetentionInput => PutObjectRetentionOutput;
    get_object_retention: GetObjectRetentionInput => GetObjectRetentionOutput;
    put_object_legal_hold: PutObjectLegalHoldInput => PutObjectLegalHoldOutput;
    get_object_legal_hold: GetObjectLegalHoldInput => GetObjectLegalHoldOutput;
    get_object_lock_configuration: GetObjectLockConfigurationInput => GetObjectLockConfigurationOutput;
    put_bucket_versioning: PutBucketVersioningInput => PutBucketVersioningOutput;
    get_object_tagging: GetObjectTaggingInput => GetObjectTaggingOutput;
    put_object_tagging: PutObjectTaggingInput => PutObjectTaggingOutput;
    delete_object_tagging: DeleteObjectTaggingInput => DeleteObjectTaggingOutput;
    get_object_acl: GetObjectAclInput => GetObjectAclOutput;
}

/// The upstream's buckets, less those the caller's key may not use.
pub(super) async fn list_buckets(
    gw: &Gateway,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let scope = req
        .credentials
        .as_ref()
        .and_then(|c| gw.credentials.scope(&c.access_key))
        .cloned();
    let mut out = gw
        .upstream
        .s3()
        .list_buckets(request(req.input))
        .await?
        .output;
    if let Some(buckets) = &mut out.buckets {
        buckets.retain(|b| {
            b.name
                .as_deref()
                .is_some_and(|n| scope.as_ref().is_some_and(|s| s.allows(n)))
        });
    }
    Ok(S3Response::new(out))
}

//! DeleteObject and DeleteObjects: passed through with ETag conditions in the upstream's
//! terms; the header cache forgets the keys. DeleteObjects answers for keys the gateway
//! refuses to name itself, per key.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::object_key::check_key;
use crate::error::refuse_keys;
use crate::gateway::Gateway;
use crate::object::forget;
use crate::upstream::request;

pub(super) async fn delete_object(
    gw: &Gateway,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let mut input = req.input;
    check_key(&input.key)?;
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    input.if_match = super::upload::upstream_condition(input.if_match.take());
    let out = gw.upstream.s3().delete_object(request(input)).await;
    forget(gw, &bucket, &key).await;
    Ok(S3Response::new(out?.output))
}

pub(super) async fn delete_objects(
    gw: &Gateway,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let mut input = req.input;
    // A key the gateway cannot name (only a writer going straight to the upstream can make
    // one) is reported in the answer's errors, as S3 reports a key it cannot delete, and the
    // rest of the batch goes on.
    let refused = refuse_keys(&mut input.delete.objects, check_key);
    for o in &mut input.delete.objects {
        o.e_tag = o
            .e_tag
            .take()
            .map(|e| ETag::Strong(crate::etag::to_upstream_value(e.value())));
    }
    let mut output = if input.delete.objects.is_empty() && !refused.is_empty() {
        DeleteObjectsOutput::default()
    } else {
        let bucket = input.bucket.clone();
        let keys: Vec<String> = input.delete.objects.iter().map(|o| o.key.clone()).collect();
        let out = gw.upstream.s3().delete_objects(request(input)).await;
        for k in &keys {
            forget(gw, &bucket, k).await;
        }
        out?.output
    };
    if !refused.is_empty() {
        output.errors.get_or_insert_with(Vec::new).extend(refused);
    }
    Ok(S3Response::new(output))
}

//! DeleteObject and DeleteObjects: passed through; the header cache forgets the keys.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::gateway::Gateway;
use crate::object::{check_key, forget};
use crate::upstream::request;

pub(super) async fn delete_object(
    gw: &Gateway,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    check_key(&req.input.key)?;
    let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
    let out = gw.upstream.s3().delete_object(request(req.input)).await;
    forget(gw, &bucket, &key).await;
    Ok(S3Response::new(out?.output))
}

pub(super) async fn delete_objects(
    gw: &Gateway,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    for o in &req.input.delete.objects {
        check_key(&o.key)?;
    }
    let bucket = req.input.bucket.clone();
    let keys: Vec<String> = req
        .input
        .delete
        .objects
        .iter()
        .map(|o| o.key.clone())
        .collect();
    let out = gw.upstream.s3().delete_objects(request(req.input)).await;
    for k in &keys {
        forget(gw, &bucket, k).await;
    }
    Ok(S3Response::new(out?.output))
}

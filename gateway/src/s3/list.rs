//! Listings: ListObjects V1 and V2 (always V2 upstream: B2's V1 cannot page past 1000
//! keys) and ListObjectVersions, with plaintext sizes and client ETags. Sizes of aligned
//! objects come from the listed size alone; an object with a trailer costs its header and
//! trailer reads once (then the cache).

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::etag;
use crate::gateway::Gateway;
use crate::object::{listed_size, locate_current};
use crate::upstream::request;

/// S3 treats an empty `delimiter=` or `prefix=` as absent; rclone and restic send them.
fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

async fn plaintext_size(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version: Option<&str>,
    stored: Option<i64>,
    etag: Option<&str>,
) -> Option<i64> {
    let stored = stored?;
    if let Some(n) = listed_size(stored) {
        return Some(n);
    }
    match locate_current(gw, bucket, key, version, etag).await {
        Ok(l) => i64::try_from(l.size()).ok(),
        Err(e) => {
            tracing::warn!(bucket, key, error = %e, "listed object is not a readable kura object; reporting its stored size");
            Some(stored)
        }
    }
}

async fn map_objects(
    gw: &Gateway,
    bucket: &str,
    contents: Option<Vec<Object>>,
) -> Option<Vec<Object>> {
    let mut contents = contents?;
    for o in &mut contents {
        if let Some(key) = o.key.clone() {
            let etag = o.e_tag.as_ref().map(ETag::value);
            o.size = plaintext_size(gw, bucket, &key, None, o.size, etag).await;
        }
        o.e_tag = o.e_tag.as_ref().map(etag::to_client);
        o.checksum_algorithm = None;
        o.checksum_type = None;
    }
    Some(contents)
}

pub(super) async fn list_objects_v2(
    gw: &Gateway,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let mut input = req.input;
    input.delimiter = non_empty(input.delimiter);
    input.prefix = non_empty(input.prefix);
    input.start_after = non_empty(input.start_after);
    let bucket = input.bucket.clone();
    let mut out = gw
        .upstream
        .s3()
        .list_objects_v2(request(input))
        .await?
        .output;
    out.contents = map_objects(gw, &bucket, out.contents.take()).await;
    Ok(S3Response::new(out))
}

pub(super) async fn list_objects(
    gw: &Gateway,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = req.input;
    let up = ListObjectsV2Input {
        bucket: input.bucket.clone(),
        delimiter: non_empty(input.delimiter.clone()),
        prefix: non_empty(input.prefix.clone()),
        start_after: non_empty(input.marker.clone()),
        max_keys: input.max_keys,
        encoding_type: input.encoding_type.clone(),
        ..Default::default()
    };
    let out = gw.upstream.s3().list_objects_v2(request(up)).await?.output;
    let contents = map_objects(gw, &input.bucket, out.contents).await;
    let truncated = out.is_truncated.unwrap_or(false);
    // V1 has no continuation token: the next marker is the greatest key or prefix returned.
    let last_key = contents
        .as_ref()
        .and_then(|c| c.last())
        .and_then(|o| o.key.clone());
    let last_prefix = out
        .common_prefixes
        .as_ref()
        .and_then(|p| p.last())
        .and_then(|p| p.prefix.clone());
    let next_marker = truncated
        .then(|| last_key.into_iter().chain(last_prefix).max())
        .flatten();
    let output = ListObjectsOutput {
        name: Some(input.bucket),
        prefix: input.prefix,
        delimiter: input.delimiter,
        marker: input.marker,
        max_keys: out.max_keys,
        encoding_type: out.encoding_type,
        is_truncated: Some(truncated),
        next_marker,
        contents,
        common_prefixes: out.common_prefixes,
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

pub(super) async fn list_object_versions(
    gw: &Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let mut input = req.input;
    input.delimiter = non_empty(input.delimiter);
    input.prefix = non_empty(input.prefix);
    let bucket = input.bucket.clone();
    let mut out = gw
        .upstream
        .s3()
        .list_object_versions(request(input))
        .await?
        .output;
    if let Some(versions) = &mut out.versions {
        for v in versions {
            if let Some(key) = v.key.clone() {
                let etag = v.e_tag.as_ref().map(ETag::value);
                v.size =
                    plaintext_size(gw, &bucket, &key, v.version_id.as_deref(), v.size, etag).await;
            }
            v.e_tag = v.e_tag.as_ref().map(etag::to_client);
            v.checksum_algorithm = None;
            v.checksum_type = None;
        }
    }
    Ok(S3Response::new(out))
}

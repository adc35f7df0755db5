//! PutObject: seal the client's body into a single-part kura object on its way upstream.

use std::sync::Arc;

use kura_keys::{ObjectName, ObjectSecrets, PartSealer};
use s3s::dto::{PutObjectInput, PutObjectOutput};
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::object_key::check_key;
use super::upload::{client_expectations, seal_body, strip_aws_chunked, upstream_condition};
use crate::error::keys_error;
use crate::etag;
use crate::gateway::Gateway;
use crate::meta::seal_metadata;
use crate::object::forget;
use crate::upstream::request;

pub(super) async fn put_object(
    gw: &Gateway,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let S3Request {
        mut input,
        headers,
        trailing_headers,
        ..
    } = req;
    check_key(&input.key)?;
    if input.write_offset_bytes.is_some() {
        // An append (S3 Express) would add a second whole kura body to the stored one,
        // which then no longer opens.
        return Err(s3_error!(
            NotImplemented,
            "appending to an object (x-amz-write-offset-bytes) is not supported"
        ));
    }
    let name = ObjectName::new(&input.bucket, &input.key).map_err(keys_error)?;
    let (expect, echo) = client_expectations!(input, headers, trailing_headers)?;
    let plaintext_len = expect.len;
    let secrets = ObjectSecrets::generate().map_err(keys_error)?;
    let header = secrets
        .header(&gw.keys(), &name, gw.cipher, 0)
        .map_err(keys_error)?;
    let payload = Arc::new(secrets.payload_key(gw.cipher));
    let sealer = PartSealer::new(&payload, 1, Some(header)).map_err(keys_error)?;
    let (blob, len, failure) = seal_body(input.body.take(), sealer, expect, true)?;
    let metadata = seal_metadata(&secrets, gw.cipher, &header, input.metadata.take())?;
    let up = PutObjectInput {
        body: Some(blob),
        content_length: Some(i64::try_from(len).map_err(|_| s3_error!(EntityTooLarge))?),
        metadata: Some(metadata),
        content_encoding: input
            .content_encoding
            .take()
            .as_deref()
            .and_then(strip_aws_chunked),
        checksum_algorithm: None,
        if_match: upstream_condition(input.if_match.take()),
        if_none_match: upstream_condition(input.if_none_match.take()),
        ..input
    };
    let (bucket, key) = (up.bucket.clone(), up.key.clone());
    let result = if super::object_lock::has_object_lock(&up) {
        let mut up = up;
        let blob = up
            .body
            .take()
            .ok_or_else(|| s3_error!(InternalError, "no body"))?;
        super::object_lock::put_with_object_lock(gw, up, blob, len)
            .await
            .map(S3Response::new)
    } else {
        gw.upstream.s3().put_object(request(up)).await
    };
    forget(gw, &bucket, &key).await;
    let out = failure.settle(result)?.output;
    gw.metrics.bytes_in(plaintext_len);
    let output = PutObjectOutput {
        e_tag: out.e_tag.as_ref().map(etag::to_client),
        version_id: out.version_id,
        checksum_crc32: echo.checksum_crc32,
        checksum_crc32c: echo.checksum_crc32c,
        checksum_crc64nvme: echo.checksum_crc64nvme,
        checksum_sha1: echo.checksum_sha1,
        checksum_sha256: echo.checksum_sha256,
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

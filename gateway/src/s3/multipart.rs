//! The multipart family but its completion (`complete.rs`): create, upload a part, abort,
//! list. Each part is sealed on its own (SPEC 5.2), by whichever replica receives it: the
//! object's secrets travel in the upload ID (`upload_id.rs`). Part 1 carries the header,
//! with `P` = its plaintext length.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use std::sync::Arc;

use kura_keys::{ObjectName, PartSealer};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::object_key::check_key;
use super::upload::{client_expectations, part_plaintext_len, seal_body, strip_aws_chunked};
use crate::error::keys_error;
use crate::gateway::Gateway;
use crate::meta::seal_metadata;
use crate::upstream::request;
use crate::{etag, upload_id};

pub(super) async fn create(
    gw: &Gateway,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let mut input = req.input;
    check_key(&input.key)?;
    let name = ObjectName::new(&input.bucket, &input.key).map_err(keys_error)?;
    let secrets = kura_keys::ObjectSecrets::generate().map_err(keys_error)?;
    // The metadata's header copy lets HEAD open the metadata; its P is not known yet.
    let meta_header = secrets
        .header(&gw.keys(), &name, gw.cipher, 0)
        .map_err(keys_error)?;
    let metadata = seal_metadata(&secrets, gw.cipher, &meta_header, input.metadata.take())?;
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let up = CreateMultipartUploadInput {
        metadata: Some(metadata),
        checksum_algorithm: None,
        checksum_type: None,
        content_encoding: input
            .content_encoding
            .take()
            .as_deref()
            .and_then(strip_aws_chunked),
        ..input
    };
    let out = gw
        .upstream
        .s3()
        .create_multipart_upload(request(up))
        .await?
        .output;
    let upstream_id = out
        .upload_id
        .clone()
        .ok_or_else(|| s3_error!(InternalError, "upstream gave no upload ID"))?;
    let client_id =
        upload_id::encode(&gw.keys(), &bucket, &key, &upstream_id, &secrets, gw.cipher)?;
    let output = CreateMultipartUploadOutput {
        bucket: Some(bucket),
        key: Some(key),
        upload_id: Some(client_id),
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

pub(super) async fn upload_part(
    gw: &Gateway,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let S3Request {
        mut input,
        headers,
        trailing_headers,
        ..
    } = req;
    check_key(&input.key)?;
    let (upstream_id, secrets, cipher) =
        upload_id::decode(&gw.keys(), &input.bucket, &input.key, &input.upload_id)?;
    let part = u32::try_from(input.part_number)
        .ok()
        .filter(|p| (1..=kura_keys::format::MAX_PART_NUMBER).contains(p))
        .ok_or_else(|| s3_error!(InvalidArgument, "part numbers run from 1 to 10000"))?;
    let (expect, echo) = client_expectations!(input, headers, trailing_headers)?;
    let plaintext_len = expect.len;
    let header = if part == 1 {
        let name = ObjectName::new(&input.bucket, &input.key).map_err(keys_error)?;
        Some(
            secrets
                .header(&gw.keys(), &name, cipher, plaintext_len)
                .map_err(keys_error)?,
        )
    } else {
        None
    };
    let payload = Arc::new(secrets.payload_key(cipher));
    let sealer = PartSealer::new(&payload, part, header).map_err(keys_error)?;
    let (blob, len, failure) = seal_body(input.body.take(), sealer, expect, part == 1)?;
    let up = UploadPartInput {
        body: Some(blob),
        content_length: Some(i64::try_from(len).map_err(|_| s3_error!(EntityTooLarge))?),
        upload_id: upstream_id,
        checksum_algorithm: None,
        ..input
    };
    let out = failure
        .settle(gw.upstream.s3().upload_part(request(up)).await)?
        .output;
    gw.metrics.bytes_in(plaintext_len);
    let output = UploadPartOutput {
        e_tag: out.e_tag.as_ref().map(etag::to_client),
        checksum_crc32: echo.checksum_crc32,
        checksum_crc32c: echo.checksum_crc32c,
        checksum_crc64nvme: echo.checksum_crc64nvme,
        checksum_sha1: echo.checksum_sha1,
        checksum_sha256: echo.checksum_sha256,
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

pub(super) async fn abort(
    gw: &Gateway,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let mut input = req.input;
    input.upload_id = upload_id::upstream_id(&input.upload_id).to_string();
    let out = gw
        .upstream
        .s3()
        .abort_multipart_upload(request(input))
        .await?;
    Ok(S3Response::new(out.output))
}

pub(super) async fn list_parts(
    gw: &Gateway,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let mut input = req.input;
    let client_id = input.upload_id.clone();
    input.upload_id = upload_id::upstream_id(&client_id).to_string();
    let mut out = gw.upstream.s3().list_parts(request(input)).await?.output;
    if let Some(parts) = &mut out.parts {
        // S3 lists parts in part number order; s3s-fs lists them in directory order.
        parts.sort_by_key(|p| p.part_number);
        for p in parts.iter_mut() {
            if let (Some(n), Some(size)) = (p.part_number, p.size) {
                p.size = part_plaintext_len(u32::try_from(n).unwrap_or(0), size)
                    .ok()
                    .and_then(|n| i64::try_from(n).ok());
            }
            p.e_tag = p.e_tag.as_ref().map(etag::to_client);
            p.checksum_crc32 = None;
            p.checksum_crc32c = None;
            p.checksum_crc64nvme = None;
            p.checksum_sha1 = None;
            p.checksum_sha256 = None;
        }
    }
    out.upload_id = Some(client_id);
    Ok(S3Response::new(out))
}

pub(super) async fn list_uploads(
    gw: &Gateway,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let out = gw
        .upstream
        .s3()
        .list_multipart_uploads(request(req.input))
        .await?;
    // These IDs carry no secrets: they can list parts and abort, not upload more parts.
    Ok(S3Response::new(out.output))
}

//! PutObject: seal the client's body into a single-part kura object on its way upstream.

use std::sync::Arc;

use kura_keys::{ObjectName, ObjectSecrets, PartSealer};
use s3s::dto::{ETag, ETagCondition, PutObjectInput, PutObjectOutput, StreamingBlob};
use s3s::{S3Request, S3Response, S3Result, TrailingHeaders, s3_error};

use super::object_key::check_key;
use crate::body::{Expect, FailureSlot, VerifyingSealer};
use crate::error::keys_error;
use crate::gateway::Gateway;
use crate::meta::seal_metadata;
use crate::object::forget;
use crate::upstream::request;
use crate::{body, etag};

/// The most one upstream PUT or part may hold, as in S3.
const MAX_STORED: u64 = 5 << 30;

/// What a PutObject or UploadPart input declares about its body (both have the same
/// fields): the expectations, and the header checksums to echo in the response. Takes the
/// checksum and MD5 fields out of the input, so none of them is forwarded upstream.
macro_rules! client_expectations {
    ($input:ident, $headers:ident, $trailing:ident) => {{
        let checksums = $crate::s3::put::header_checksums(
            $input.checksum_crc32.take(),
            $input.checksum_crc32c.take(),
            $input.checksum_crc64nvme.take(),
            $input.checksum_sha1.take(),
            $input.checksum_sha256.take(),
        );
        let echo = checksums.clone();
        $crate::s3::put::expectations(
            &$headers,
            $input.content_length,
            $input.content_md5.take(),
            checksums,
            $trailing,
        )
        .map(|expect| (expect, echo))
    }};
}
pub(super) use client_expectations;

/// The checksums a client sent as headers.
pub(super) fn header_checksums(
    crc32: Option<String>,
    crc32c: Option<String>,
    crc64nvme: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
) -> s3s::dto::Checksum {
    s3s::dto::Checksum {
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_crc64nvme: crc64nvme,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        ..Default::default()
    }
}

/// What the client declared about its body: length, Content-MD5, checksums in headers, and
/// which checksums its trailer will carry.
pub(super) fn expectations(
    headers: &http::HeaderMap,
    content_length: Option<i64>,
    md5: Option<String>,
    checksums: s3s::dto::Checksum,
    trailing: Option<TrailingHeaders>,
) -> S3Result<Expect> {
    let decoded = headers
        .get("x-amz-decoded-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let len = decoded
        .or_else(|| content_length.and_then(|n| u64::try_from(n).ok()))
        .ok_or_else(|| {
            s3_error!(
                MissingContentLength,
                "a body needs Content-Length or x-amz-decoded-content-length"
            )
        })?;
    let trailer = headers
        .get("x-amz-trailer")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .filter_map(|t| {
                    t.trim()
                        .to_ascii_lowercase()
                        .strip_prefix("x-amz-checksum-")
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Expect {
        len,
        md5,
        checksums,
        trailer,
        trailing,
    })
}

/// Seals `blob` (the client's plaintext) behind `sealer`, verifying it against `expect`;
/// returns the ciphertext blob, its length, and the slot that names what went wrong.
pub(super) fn seal_body(
    blob: Option<StreamingBlob>,
    sealer: PartSealer,
    expect: Expect,
    header: bool,
) -> S3Result<(StreamingBlob, u64, FailureSlot)> {
    let part =
        kura_keys::part_ciphertext_len(expect.len).ok_or_else(|| s3_error!(EntityTooLarge))?;
    let len = part
        + if header {
            kura_keys::format::HEADER_SIZE as u64
        } else {
            0
        };
    if len > MAX_STORED {
        return Err(s3_error!(
            EntityTooLarge,
            "kura stores 32 bytes more per 64 KiB, and one PUT or part may store at most 5 GiB: \
             send at most 5,366,088,764 bytes per PUT or part"
        ));
    }
    let failure = FailureSlot::default();
    let blob = blob.unwrap_or_else(|| StreamingBlob::from(s3s::Body::empty()));
    let ciphertext = body::transform(
        body::watch_client_body(blob, failure.clone()),
        VerifyingSealer::new(sealer, expect, failure.clone()),
        len,
    );
    Ok((ciphertext, len, failure))
}

/// An If-Match / If-None-Match condition in the upstream's ETag terms.
pub(super) fn upstream_condition(cond: Option<ETagCondition>) -> Option<ETagCondition> {
    cond.map(|c| match c {
        ETagCondition::ETag(e) => {
            ETagCondition::ETag(ETag::Strong(etag::to_upstream_value(e.value())))
        }
        ETagCondition::Any => ETagCondition::Any,
    })
}

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
        .header(&gw.keyring, &name, gw.cipher, 0)
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
    let result = if super::lock::is_locked(&up) {
        let mut up = up;
        let blob = up
            .body
            .take()
            .ok_or_else(|| s3_error!(InternalError, "no body"))?;
        super::lock::put_locked(gw, up, blob, len)
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

/// `Content-Encoding` without the transfer framing `aws-chunked`, which is never stored.
pub(super) fn strip_aws_chunked(v: &str) -> Option<String> {
    let rest: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|e| !e.eq_ignore_ascii_case("aws-chunked") && !e.is_empty())
        .collect();
    (!rest.is_empty()).then(|| rest.join(","))
}

//! What the writes that carry a client's body share (PutObject, UploadPart, and the
//! locked PutObject): reading what the client declared about its body, sealing it on its
//! way up, translating the headers that must not reach the upstream as they are, and the
//! plaintext length a stored part holds.

use kura_keys::format::HEADER_SIZE;
use kura_keys::{PartSealer, SizeInfo};
use s3s::dto::{ETag, ETagCondition, StreamingBlob};
use s3s::{S3Result, TrailingHeaders, s3_error};

use crate::body::{self, Expect, FailureSlot, VerifyingSealer};
use crate::etag;

/// The most one upstream PUT or part may hold, as in S3.
const MAX_STORED: u64 = 5 << 30;

/// What a PutObject or UploadPart input declares about its body (both have the same
/// fields): the expectations, and the header checksums to echo in the response. Takes the
/// checksum and MD5 fields out of the input, so none of them is forwarded upstream.
macro_rules! client_expectations {
    ($input:ident, $headers:ident, $trailing:ident) => {{
        let checksums = $crate::s3::upload::header_checksums(
            $input.checksum_crc32.take(),
            $input.checksum_crc32c.take(),
            $input.checksum_crc64nvme.take(),
            $input.checksum_sha1.take(),
            $input.checksum_sha256.take(),
        );
        let echo = checksums.clone();
        $crate::s3::upload::expectations(
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

/// `Content-Encoding` without the transfer framing `aws-chunked`, which is never stored.
pub(super) fn strip_aws_chunked(v: &str) -> Option<String> {
    let rest: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|e| !e.eq_ignore_ascii_case("aws-chunked") && !e.is_empty())
        .collect();
    (!rest.is_empty()).then(|| rest.join(","))
}

/// Plaintext length of a stored part from its stored size (part 1 holds the header).
pub(super) fn part_plaintext_len(number: u32, stored: i64) -> S3Result<u64> {
    let stored =
        u64::try_from(stored).map_err(|_| s3_error!(InternalError, "negative part size"))?;
    let body = if number == 1 {
        stored
    } else {
        stored + HEADER_SIZE as u64
    };
    match kura_keys::plaintext_size(body) {
        Ok(SizeInfo::Aligned(n)) => Ok(n),
        _ => Err(s3_error!(
            InvalidPart,
            "part {number} was not uploaded through this gateway"
        )),
    }
}

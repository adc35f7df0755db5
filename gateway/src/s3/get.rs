//! GetObject and HeadObject: sizes, ETags and metadata as the client wrote them, every
//! range form S3 accepts, `partNumber`, and the If-* conditions, decrypting on the way
//! down. A whole-object read verifies the header before it answers; a range read fetches
//! only the segments it needs (the header comes from the cache or one small read).

use kura_keys::format::HEADER_SIZE;
use std::sync::Arc;

use kura_keys::{BodyOpener, RangeOpener, SizeInfo};
use s3s::dto::{
    ETag, ETagCondition, GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput, Range,
    StreamingBlob,
};
use s3s::{S3Error, S3Request, S3Response, S3Result, s3_error};

use super::conditions::{Conditions, client_etag_of};
use super::object_key::check_key;
use crate::error::{keys_error, range_not_satisfiable};
use crate::gateway::{Gateway, Located};
use crate::meta::{open_metadata, open_metadata_of};
use crate::object::{locate_checked, locate_current, stored_len, unlocate, verify_body_header};
use crate::upstream::{Origin, request, resuming};
use crate::{body, etag};

/// The inclusive plaintext span a range or part number asks for, clamped as S3 does.
fn span(
    size: u64,
    range: Option<&Range>,
    part: Option<i32>,
    located: &Located,
) -> S3Result<(u64, u64)> {
    if let Some(n) = part {
        let n = u32::try_from(n)
            .map_err(|_| s3_error!(InvalidArgument, "partNumber must be positive"))?;
        let (start, len) = located
            .layout
            .part_span(n)
            .ok_or_else(|| invalid_part_number(located.layout.part_count()))?;
        if len == 0 {
            return Err(range_not_satisfiable(size));
        }
        return Ok((start, start + len - 1));
    }
    let r = range.ok_or_else(|| s3_error!(InternalError, "no range"))?;
    range_span(size, r)
}

/// The inclusive span `r` asks for in an object of `size` bytes, clamped as S3 does; 416
/// when none of it lies in the object.
fn range_span(size: u64, r: &Range) -> S3Result<(u64, u64)> {
    let within = r.check(size).map_err(|_| range_not_satisfiable(size))?;
    if within.is_empty() {
        // `bytes=-N` of an empty object.
        return Err(range_not_satisfiable(size));
    }
    Ok((within.start, within.end - 1))
}

/// 400 InvalidRequest, as S3 answers a read that names both a `Range` and a `partNumber`.
fn range_and_part_number(range: Option<&Range>, part: Option<i32>) -> S3Result<()> {
    if range.is_some() && part.is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter"
        ));
    }
    Ok(())
}

/// 400 InvalidPart for a `partNumber` the object does not have, as AWS S3 and Garage answer
/// it (some stores say 416 InvalidPartNumber; the S3 test suites expect this).
fn invalid_part_number(count: u32) -> S3Error {
    s3_error!(InvalidPart, "the object has {count} parts")
}

/// The conditions of a GetObject or HeadObject input (same field names).
macro_rules! conditions_of {
    ($input:expr) => {
        Conditions {
            if_match: $input.if_match.clone(),
            if_none_match: $input.if_none_match.clone(),
            if_modified_since: $input.if_modified_since.clone(),
            if_unmodified_since: $input.if_unmodified_since.clone(),
        }
    };
}

/// The plaintext size of an object the upstream just described (stored length, ETag): from
/// the length alone when it is aligned, else from its trailer (SPEC 6.1), with what the
/// trailer read found.
async fn plaintext_size_of(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    upstream_etag: Option<&ETag>,
    stored: u64,
) -> S3Result<(u64, Option<Arc<Located>>)> {
    match kura_keys::plaintext_size(stored).map_err(keys_error)? {
        SizeInfo::Aligned(n) => Ok((n, None)),
        SizeInfo::Trailer => {
            let etag = upstream_etag.map(ETag::value);
            let located = locate_current(gw, bucket, key, version_id, etag).await?;
            Ok((located.size(), Some(located)))
        }
    }
}

pub(super) async fn get_object(
    gw: &Gateway,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let input = req.input;
    check_key(&input.key)?;
    range_and_part_number(input.range.as_ref(), input.part_number)?;
    if input.range.is_some() || input.part_number.is_some() {
        return get_span(gw, input, true).await;
    }
    get_whole(gw, input).await
}

/// A whole-object read: the header is verified before the answer starts.
async fn get_whole(gw: &Gateway, input: GetObjectInput) -> S3Result<S3Response<GetObjectOutput>> {
    let conditions = conditions_of!(input);
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let up = GetObjectInput {
        bucket: input.bucket,
        key: input.key,
        version_id: input.version_id,
        ..Default::default()
    };
    let mut out = gw.upstream.s3().get_object(request(up)).await?.output;
    let client_etag = etag::client_value_of(out.e_tag.as_ref());
    conditions.check(&client_etag, out.last_modified.as_ref())?;
    let stored = stored_len(out.content_length)?;
    let (size, located) = plaintext_size_of(
        gw,
        &bucket,
        &key,
        out.version_id.as_deref(),
        out.e_tag.as_ref(),
        stored,
    )
    .await?;
    // Verify the header before answering: a body that is not ours, or not for this name,
    // is an error response, not a 200 that breaks off.
    let (verified, rest, blob) = verify_body_header(gw, &bucket, &key, out.body.take()).await?;
    let metadata = open_metadata_of(
        gw,
        (&bucket, &key),
        out.metadata.as_ref(),
        &verified.secrets().commitment(),
    )?;
    // With a trailer, its parts table was read for the size: a body whose parts differ
    // from it stops before the first that does, not at the trailer.
    let part_size = verified.header().part_size();
    let opener = BodyOpener::after_header(verified.into_payload_key()).expect_part_size(part_size);
    let opener = match located.map(|l| l.layout.table_parts()) {
        Some(Some(parts)) => opener.expect_parts(parts),
        Some(None) => opener.expect_trailer(true),
        None => opener.expect_trailer(false),
    };
    let origin = out.e_tag.as_ref().map(|e| Origin {
        upstream: gw.upstream.clone(),
        bucket,
        key,
        version_id: out.version_id.clone(),
        upstream_etag: e.value().to_string(),
        next: (HEADER_SIZE + rest.len()) as u64,
        last: stored.saturating_sub(1),
    });
    let blob = mended(blob, origin);
    let plain = body::transform(body::prepend(rest, blob), opener, size);
    gw.metrics.bytes_out(size);
    let output = GetObjectOutput {
        body: Some(plain),
        content_length: Some(i64::try_from(size).unwrap_or(i64::MAX)),
        e_tag: Some(ETag::Strong(client_etag)),
        metadata,
        accept_ranges: Some("bytes".into()),
        content_range: None,
        checksum_crc32: None,
        checksum_crc32c: None,
        checksum_crc64nvme: None,
        checksum_sha1: None,
        checksum_sha256: None,
        checksum_type: None,
        ..out
    };
    Ok(S3Response::new(output))
}

/// An upstream body that is picked up where it breaks off, when its answer named the
/// upstream ETag that pins the rest to the same object (`origin`).
fn mended(blob: StreamingBlob, origin: Option<Origin>) -> body::BoxedBytes {
    match origin {
        Some(origin) => Box::pin(resuming(blob, origin)),
        None => Box::pin(blob),
    }
}

/// `partNumber=1` of an empty object: its one part has no byte range to read, so it is
/// read as the whole (empty) object, with the part count HEAD gives.
async fn empty_part_one(
    gw: &Gateway,
    input: GetObjectInput,
) -> S3Result<S3Response<GetObjectOutput>> {
    let whole = GetObjectInput {
        part_number: None,
        ..input
    };
    let mut out = Box::pin(get_whole(gw, whole)).await?;
    out.output.parts_count = Some(1);
    Ok(out)
}

/// A range or part read: locate the object, then fetch and open only its segments.
async fn get_span(
    gw: &Gateway,
    input: GetObjectInput,
    retry: bool,
) -> S3Result<S3Response<GetObjectOutput>> {
    let (bucket, key, version) = (
        input.bucket.clone(),
        input.key.clone(),
        input.version_id.clone(),
    );
    let conditions = conditions_of!(input);
    let located = locate_checked(gw, &bucket, &key, version.as_deref(), |l| {
        conditions.check(&client_etag_of(l), l.last_modified.as_ref())
    })
    .await?;
    let client_etag = client_etag_of(&located);
    let size = located.size();
    if size == 0 && input.part_number == Some(1) {
        return empty_part_one(gw, input).await;
    }
    let (start, end) = span(size, input.range.as_ref(), input.part_number, &located)?;
    let (opener, ct) = RangeOpener::new(located.key.clone(), located.layout.clone(), start, end)
        .map_err(keys_error)?;
    let up = GetObjectInput {
        bucket: bucket.clone(),
        key: key.clone(),
        version_id: version.clone(),
        range: Some(Range::Int {
            first: ct.start,
            last: Some(ct.end),
        }),
        if_match: located
            .upstream_etag
            .clone()
            .map(|e| ETagCondition::ETag(ETag::Strong(e))),
        ..Default::default()
    };
    let result = gw.upstream.s3().get_object(request(up)).await;
    let changed = match &result {
        Err(e) => *e.code() == s3s::S3ErrorCode::PreconditionFailed,
        Ok(r) => r.output.e_tag.as_ref().map(ETag::value) != located.upstream_etag.as_deref(),
    };
    if changed {
        // The object changed since its header was cached: look again, once.
        unlocate(gw, &bucket, &key, version.as_deref()).await;
        if retry {
            return Box::pin(get_span(gw, input, false)).await;
        }
        return Err(s3_error!(
            InternalError,
            "the object changed while it was being read"
        ));
    }
    let mut out = result?.output;
    let blob = out
        .body
        .take()
        .ok_or_else(|| s3_error!(InternalError, "upstream sent no body"))?;
    let len = end - start + 1;
    let origin = out.e_tag.as_ref().map(|e| Origin {
        upstream: gw.upstream.clone(),
        bucket: bucket.clone(),
        key: key.clone(),
        version_id: out.version_id.clone().or(version),
        upstream_etag: e.value().to_string(),
        next: ct.start,
        last: ct.end,
    });
    let blob = mended(blob, origin);
    let plain = body::transform(blob, opener, len);
    gw.metrics.bytes_out(len);
    let metadata = open_metadata_of(
        gw,
        (&bucket, &key),
        out.metadata.as_ref(),
        &located.commitment,
    )?;
    let output = GetObjectOutput {
        body: Some(plain),
        content_length: Some(i64::try_from(len).unwrap_or(i64::MAX)),
        content_range: Some(format!("bytes {start}-{end}/{size}")),
        e_tag: Some(ETag::Strong(client_etag)),
        metadata,
        accept_ranges: Some("bytes".into()),
        parts_count: input
            .part_number
            .map(|_| i32::try_from(located.layout.part_count()).unwrap_or(i32::MAX)),
        checksum_crc32: None,
        checksum_crc32c: None,
        checksum_crc64nvme: None,
        checksum_sha1: None,
        checksum_sha256: None,
        checksum_type: None,
        ..out
    };
    Ok(S3Response::new(output))
}

/// How many times a HEAD asks the upstream again when the object changed between its
/// upstream HEAD and the read of the body's header pinned to it (a writer replacing the
/// object often, as a backup's session object is), before it answers 503 SlowDown.
const HEAD_TRIES: usize = 3;

pub(super) async fn head_object(
    gw: &Gateway,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let mut tries = 1;
    loop {
        match head_once(gw, req.input.clone()).await {
            Err(e) if crate::object::is_changed_while_read(&e) && tries < HEAD_TRIES => {
                tries += 1;
            }
            answer => return answer,
        }
    }
}

async fn head_once(gw: &Gateway, input: HeadObjectInput) -> S3Result<S3Response<HeadObjectOutput>> {
    check_key(&input.key)?;
    range_and_part_number(input.range.as_ref(), input.part_number)?;
    let conditions = conditions_of!(input);
    let (bucket, key, part) = (input.bucket.clone(), input.key.clone(), input.part_number);
    let up = HeadObjectInput {
        bucket: input.bucket,
        key: input.key,
        version_id: input.version_id,
        ..Default::default()
    };
    let mut out = gw.upstream.s3().head_object(request(up)).await?.output;
    let client_etag = etag::client_value_of(out.e_tag.as_ref());
    conditions.check(&client_etag, out.last_modified.as_ref())?;
    let stored = stored_len(out.content_length)?;
    // S3 answers a HEAD with a satisfiable Range or a part number as the GET would: 206,
    // with the span's length and where it lies; part 1 of an empty object is the object.
    let (size, parts_count, span) = if let Some(n) = part {
        let current = out.e_tag.as_ref().map(ETag::value);
        let located = locate_current(gw, &bucket, &key, out.version_id.as_deref(), current).await?;
        let size = located.size();
        let count = i32::try_from(located.layout.part_count()).unwrap_or(i32::MAX);
        if size == 0 && n == 1 {
            (0, Some(1), None)
        } else {
            (size, Some(count), Some(span(size, None, part, &located)?))
        }
    } else {
        let version = out.version_id.as_deref();
        let size = plaintext_size_of(gw, &bucket, &key, version, out.e_tag.as_ref(), stored)
            .await?
            .0;
        let span = input
            .range
            .as_ref()
            .map(|r| range_span(size, r))
            .transpose()?;
        (size, None, span)
    };
    let metadata = open_metadata(
        gw,
        (&bucket, &key, out.version_id.as_deref()),
        out.e_tag.as_ref().map(ETag::value),
        out.metadata.take(),
    )
    .await?;
    let (length, content_range) = match span {
        Some((start, end)) => (end - start + 1, Some(format!("bytes {start}-{end}/{size}"))),
        None => (size, None),
    };
    let partial = content_range.is_some();
    let output = HeadObjectOutput {
        content_length: Some(i64::try_from(length).unwrap_or(i64::MAX)),
        content_range,
        e_tag: Some(ETag::Strong(client_etag)),
        metadata,
        accept_ranges: Some("bytes".into()),
        parts_count,
        checksum_crc32: None,
        checksum_crc32c: None,
        checksum_crc64nvme: None,
        checksum_sha1: None,
        checksum_sha256: None,
        checksum_type: None,
        ..out
    };
    let mut response = S3Response::new(output);
    if partial {
        response
            .extensions
            .insert(super::Status(http::StatusCode::PARTIAL_CONTENT));
    }
    Ok(response)
}

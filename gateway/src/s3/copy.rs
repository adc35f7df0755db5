//! CopyObject and UploadPartCopy.
//!
//! CopyObject re-wraps instead of re-encrypting: the body's segments stay as they are and
//! only the 164-byte header changes (bound to the new name, and holding the same data key).
//! The new header and the stored bytes after it, up to [`THROUGH_GATEWAY`], pass through
//! the gateway (nothing is decrypted); the rest of a larger object stays where it is and the
//! upstream copies it server-side into a multipart upload (UploadPartCopy, pieces of up to
//! 5 GB), so objects of any size copy, beyond the 5 GiB of one PUT. The kura body is the
//! same bytes however the store cuts its parts.
//!
//! UploadPartCopy must re-encrypt: the part belongs to another object with another key. It
//! reads the source range through the gateway's range path and seals it as the part.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use kura_keys::format::HEADER_SIZE;
use kura_keys::{ObjectName, PartSealer, RangeOpener};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::conditions::{Conditions, client_etag_of};
use super::object_key::check_key;
use super::object_lock;
use super::own_upload::{CopyFrom, OwnUpload, complete_own, copy_parts, create_like};
use crate::body;
use crate::error::keys_error;
use crate::gateway::Gateway;
use crate::meta::{open_metadata_of, seal_metadata};
use crate::object::{
    forget, locate_checked, stored_len, total_from_content_range, unlocate, verify_body_header,
};
use crate::upstream::request;
use crate::{etag, upload_id};

/// Stored bytes of a copy that pass through the gateway: the new header and the body up to
/// here go up as one PUT, or as the first part of a multipart upload whose other parts the
/// upstream copies. 8 MiB: above the 5 MiB minimum part of S3 and B2.
const THROUGH_GATEWAY: u64 = 8 << 20;
// A locked copy buffers its first part to send its MD5 (object_lock.rs), one part at most.
const _: () = assert!(THROUGH_GATEWAY <= object_lock::PART as u64);

fn source(cs: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match cs {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(str::to_string),
        )),
        _ => Err(s3_error!(
            NotImplemented,
            "access point and outpost copy sources are not supported"
        )),
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "one S3 operation, read top to bottom"
)]
pub(super) async fn copy_object(
    gw: &Gateway,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let mut input = req.input;
    check_key(&input.key)?;
    let (src_bucket, src_key, src_version) = source(&input.copy_source)?;
    check_key(&src_key)?;
    let conditions = Conditions {
        if_match: input.copy_source_if_match.take(),
        if_none_match: input.copy_source_if_none_match.take(),
        if_modified_since: input.copy_source_if_modified_since.take(),
        if_unmodified_since: input.copy_source_if_unmodified_since.take(),
    };
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    // As S3: a copy onto itself must change something, or it is a mistake (and on a
    // versioned bucket a new version that differs in nothing).
    if src_bucket == input.bucket
        && src_key == input.key
        && src_version.is_none()
        && !replace
        && input.storage_class.is_none()
        && input.website_redirect_location.is_none()
        && input.server_side_encryption.is_none()
        && input
            .tagging_directive
            .as_ref()
            .is_none_or(|d| d.as_str() != TaggingDirective::REPLACE)
    {
        return Err(s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself \
             without changing the object's metadata, storage class, website redirect location \
             or encryption attributes."
        ));
    }
    let src = GetObjectInput {
        bucket: src_bucket.clone(),
        key: src_key.clone(),
        version_id: src_version.clone(),
        range: Some(Range::Int {
            first: 0,
            last: Some(THROUGH_GATEWAY - 1),
        }),
        ..Default::default()
    };
    let mut got = gw.upstream.s3().get_object(request(src)).await?.output;
    let src_etag = etag::client_value_of(got.e_tag.as_ref());
    // A failed source condition is 412 for CopyObject, whichever kind.
    conditions
        .check(&src_etag, got.last_modified.as_ref())
        .map_err(|_| s3_error!(PreconditionFailed, "a copy-source condition did not hold"))?;
    let through = stored_len(got.content_length)?;
    let ciphertext_len = total_from_content_range(got.content_range.as_deref()).unwrap_or(through);
    let (verified, rest, blob) =
        verify_body_header(gw, &src_bucket, &src_key, got.body.take()).await?;
    let dst_name = ObjectName::new(&input.bucket, &input.key).map_err(keys_error)?;
    let new_header = verified.rewrap(&gw.keys(), &dst_name).map_err(keys_error)?;
    let cipher = verified.header().cipher();
    let secrets = verified.secrets();
    let meta_header = secrets
        .header(&gw.keys(), &dst_name, cipher, 0)
        .map_err(keys_error)?;
    let user = if replace {
        input.metadata.take()
    } else {
        // The sealed metadata is bound to the source's header copy: opened with it (which
        // must wrap the body's data key), and sealed again for the copy's.
        open_metadata_of(
            gw,
            (&src_bucket, &src_key),
            got.metadata.as_ref(),
            &secrets.commitment(),
        )?
    };
    let metadata = seal_metadata(secrets, cipher, &meta_header, user)?;
    let stream = futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(&new_header)), Ok(rest)]);
    let first = body::sized(futures::StreamExt::chain(stream, blob), through);
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    // The object's headers come from the request under REPLACE, else from the source;
    // where it is stored and how (class, lock, encryption, ACL) always from the request.
    macro_rules! kept {
        ($field:ident) => {
            if replace { input.$field } else { got.$field }
        };
    }
    let replace_tags = input
        .tagging_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
    let put = PutObjectInput {
        metadata: Some(metadata),
        content_type: kept!(content_type),
        cache_control: kept!(cache_control),
        content_disposition: kept!(content_disposition),
        content_encoding: kept!(content_encoding),
        content_language: kept!(content_language),
        expires: kept!(expires),
        website_redirect_location: kept!(website_redirect_location),
        tagging: input.tagging.filter(|_| replace_tags),
        storage_class: input.storage_class,
        object_lock_mode: input.object_lock_mode,
        object_lock_retain_until_date: input.object_lock_retain_until_date,
        object_lock_legal_hold_status: input.object_lock_legal_hold_status,
        server_side_encryption: input.server_side_encryption,
        ssekms_key_id: input.ssekms_key_id,
        ssekms_encryption_context: input.ssekms_encryption_context,
        bucket_key_enabled: input.bucket_key_enabled,
        acl: input.acl,
        grant_full_control: input.grant_full_control,
        grant_read: input.grant_read,
        grant_read_acp: input.grant_read_acp,
        grant_write_acp: input.grant_write_acp,
        bucket: input.bucket,
        key: input.key,
        ..Default::default()
    };
    // Pinned to the version the first read was (the current one may change meanwhile).
    let read_version = got.version_id.clone().or(src_version);
    let from = CopyFrom {
        bucket: &src_bucket,
        key: &src_key,
        version: read_version.as_deref(),
        etag: got.e_tag.clone(),
    };
    let out = store_copy(gw, put, first, (through, ciphertext_len), &from).await;
    forget(gw, &bucket, &key).await;
    let (e_tag, version_id) = out?;
    let output = CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: e_tag.as_ref().map(etag::to_client),
            last_modified: Some(Timestamp::from(std::time::SystemTime::now())),
            ..Default::default()
        }),
        version_id,
        copy_source_version_id: got.version_id,
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

/// Stores a copy made with `put`'s settings: `first` is its first `through` stored bytes
/// (the new header and what follows it), and the rest up to `total` is copied server-side
/// from `from`. Returns the stored object's ETag and version.
async fn store_copy(
    gw: &Gateway,
    put: PutObjectInput,
    first: StreamingBlob,
    (through, total): (u64, u64),
    from: &CopyFrom<'_>,
) -> S3Result<(Option<ETag>, Option<String>)> {
    let locked = object_lock::has_object_lock(&put);
    if total <= through {
        let out = if locked {
            object_lock::put_with_object_lock(gw, put, first, through).await?
        } else {
            let put = PutObjectInput {
                body: Some(first),
                content_length: Some(i64::try_from(through).unwrap_or(i64::MAX)),
                ..put
            };
            gw.upstream.s3().put_object(request(put)).await?.output
        };
        return Ok((out.e_tag, out.version_id));
    }
    let (bucket, key) = (put.bucket.as_str(), put.key.as_str());
    let upload = OwnUpload::start(gw, create_like(&put)).await?;
    let id = upload.id();
    let result = async {
        let (content_md5, body) = if locked {
            // Object Lock wants the MD5 of what is stored (object_lock.rs): one bounded buffer.
            let body = object_lock::read_all(first, through).await?;
            (
                Some(object_lock::md5_b64(&body)),
                s3s::Body::from(body).into(),
            )
        } else {
            (None, first)
        };
        let part = UploadPartInput {
            bucket: bucket.into(),
            key: key.into(),
            upload_id: id.into(),
            part_number: 1,
            content_md5,
            content_length: Some(i64::try_from(through).unwrap_or(i64::MAX)),
            body: Some(body),
            ..Default::default()
        };
        let out = gw.upstream.s3().upload_part(request(part)).await?.output;
        let mut parts = vec![CompletedPart {
            e_tag: out.e_tag,
            part_number: Some(1),
            ..Default::default()
        }];
        parts.extend(copy_parts(gw, (bucket, key, id), from, through..total, 2).await?);
        let out = complete_own(gw, (bucket, key, id), parts, (None, None)).await?;
        Ok((out.e_tag, out.version_id))
    }
    .await;
    upload.finish(result).await
}

fn parse_copy_range(r: &str) -> S3Result<(u64, u64)> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "x-amz-copy-source-range must be bytes=first-last"
        )
    };
    let (a, b) = r
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let (a, b) = (
        a.parse::<u64>().map_err(|_| bad())?,
        b.parse::<u64>().map_err(|_| bad())?,
    );
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

#[allow(
    clippy::too_many_lines,
    reason = "one S3 operation, read top to bottom"
)]
pub(super) async fn upload_part_copy(
    gw: &Gateway,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let mut input = req.input;
    check_key(&input.key)?;
    let (src_bucket, src_key, src_version) = source(&input.copy_source)?;
    check_key(&src_key)?;
    let (upstream_id, secrets, cipher) =
        upload_id::decode(&gw.keys(), &input.bucket, &input.key, &input.upload_id)?;
    let part = u32::try_from(input.part_number)
        .ok()
        .filter(|p| (1..=kura_keys::format::MAX_PART_NUMBER).contains(p))
        .ok_or_else(|| s3_error!(InvalidArgument, "part numbers run from 1 to 10000"))?;
    let conditions = Conditions {
        if_match: input.copy_source_if_match.take(),
        if_none_match: input.copy_source_if_none_match.take(),
        if_modified_since: input.copy_source_if_modified_since.take(),
        if_unmodified_since: input.copy_source_if_unmodified_since.take(),
    };
    let located = locate_checked(gw, &src_bucket, &src_key, src_version.as_deref(), |l| {
        conditions
            .check(&client_etag_of(l), l.last_modified.as_ref())
            .map_err(|_| s3_error!(PreconditionFailed, "a copy-source condition did not hold"))
    })
    .await?;
    let size = located.size();
    let (start, end) = match input.copy_source_range.as_deref() {
        Some(r) => parse_copy_range(r)?,
        None if size > 0 => (0, size - 1),
        None => {
            return Err(s3_error!(
                InvalidRequest,
                "cannot copy a part from an empty object"
            ));
        }
    };
    if end >= size {
        return Err(s3_error!(
            InvalidRange,
            "the copy range is outside the source object"
        ));
    }
    let len = end - start + 1;
    let (opener, ct) = RangeOpener::new(located.key.clone(), located.layout.clone(), start, end)
        .map_err(keys_error)?;
    let get = GetObjectInput {
        bucket: src_bucket.clone(),
        key: src_key.clone(),
        version_id: src_version.clone(),
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
    let got = match gw.upstream.s3().get_object(request(get)).await {
        Err(e) if *e.code() == s3s::S3ErrorCode::PreconditionFailed => {
            // The source was replaced since its header was cached: the client's retry
            // finds the new one.
            unlocate(gw, &src_bucket, &src_key, src_version.as_deref()).await;
            return Err(s3_error!(
                InternalError,
                "the copy source changed while it was being read; retry"
            ));
        }
        got => got?,
    };
    let src_blob = got
        .output
        .body
        .ok_or_else(|| s3_error!(InternalError, "upstream sent no body"))?;
    let plain = body::transform(src_blob, opener, len);
    let header = if part == 1 {
        let name = ObjectName::new(&input.bucket, &input.key).map_err(keys_error)?;
        Some(
            secrets
                .header(&gw.keys(), &name, cipher, len)
                .map_err(keys_error)?,
        )
    } else {
        None
    };
    let payload = std::sync::Arc::new(secrets.payload_key(cipher));
    let sealer = PartSealer::new(&payload, part, header).map_err(keys_error)?;
    let part_len = kura_keys::part_ciphertext_len(len).ok_or_else(|| s3_error!(EntityTooLarge))?
        + if part == 1 { HEADER_SIZE as u64 } else { 0 };
    let ciphertext = body::transform(plain, sealer, part_len);
    let up = UploadPartInput {
        bucket: input.bucket,
        key: input.key,
        upload_id: upstream_id,
        part_number: input.part_number,
        body: Some(ciphertext),
        content_length: Some(i64::try_from(part_len).unwrap_or(i64::MAX)),
        ..Default::default()
    };
    let out = gw.upstream.s3().upload_part(request(up)).await?.output;
    let output = UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: out.e_tag.as_ref().map(etag::to_client),
            last_modified: Some(Timestamp::from(std::time::SystemTime::now())),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

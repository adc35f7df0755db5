//! CompleteMultipartUpload. The gateway checks the part order and the layout the stored
//! parts make before anything is completed upstream, and pins each listed part to the
//! stored part the layout was computed from; an irregular layout (unequal or unaligned
//! parts, gaps) gets its trailer (SPEC 5.3) appended by a server-side copy, so that
//! listings keep exact sizes. The completion runs as a task of its own, answered with
//! keep-alive whitespace when it takes long.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use kura_keys::format::SEGMENT_SIZE;
use kura_keys::{Layout, PartInfo, PayloadKey};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::object_key::check_key;
use super::own_upload::{CopyFrom, OwnUpload, complete_own, copy_parts};
use super::upload::{part_plaintext_len, upstream_condition};
use crate::error::keys_error;
use crate::gateway::Gateway;
use crate::object::forget;
use crate::upstream::request;
use crate::{etag, upload_id};

/// How long a completion may take upstream before the client's answer starts with 200 and
/// keep-alive whitespace: errors until then keep their own status (412, 400), and clients
/// give up on a silent connection after 60 s (aws-cli, boto3).
const COMPLETION_PROMPT: std::time::Duration = std::time::Duration::from_secs(10);

/// A part of an upstream upload, as ListParts reports it.
struct StoredPart {
    number: u32,
    size: i64,
    /// None where the upstream lists no part ETags (s3s-fs).
    e_tag: Option<ETag>,
}

/// All parts of an upstream upload, with their stored sizes.
async fn stored_parts(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    upstream_id: &str,
) -> S3Result<Vec<StoredPart>> {
    let mut parts = Vec::new();
    let mut marker = None;
    loop {
        let input = ListPartsInput {
            bucket: bucket.into(),
            key: key.into(),
            upload_id: upstream_id.into(),
            part_number_marker: marker,
            ..Default::default()
        };
        let out = gw.upstream.s3().list_parts(request(input)).await?.output;
        for p in out.parts.unwrap_or_default() {
            if let (Some(n), Some(size)) = (p.part_number, p.size) {
                parts.push(StoredPart {
                    number: u32::try_from(n).unwrap_or(0),
                    size,
                    e_tag: p.e_tag,
                });
            }
        }
        match (out.is_truncated, out.next_part_number_marker) {
            (Some(true), Some(m)) => marker = Some(m),
            _ => break,
        }
    }
    Ok(parts)
}

/// Whether parts of these plaintext lengths form a regular layout (SPEC 6.2).
fn is_regular(parts: &[PartInfo]) -> bool {
    let Some(first) = parts.first() else {
        return false;
    };
    let p = first.len;
    let contiguous = parts.iter().zip(1..).all(|(part, n)| part.number == n);
    let (last, rest) = parts.split_last().expect("non-empty");
    let equal = rest.iter().all(|part| part.len == p);
    contiguous
        && equal
        && last.len <= p
        && (parts.len() == 1 || (p > 0 && p.is_multiple_of(SEGMENT_SIZE as u64)))
}

/// Checks the part numbers a Complete request lists: each part has one, part 1 first,
/// ascending.
fn check_part_order(input: &CompleteMultipartUploadInput) -> S3Result<()> {
    let parts = input
        .multipart_upload
        .as_ref()
        .and_then(|m| m.parts.as_deref())
        .unwrap_or_default();
    let mut chosen = Vec::with_capacity(parts.len());
    for p in parts {
        let n = p
            .part_number
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| s3_error!(InvalidPart, "every listed part needs its part number"))?;
        chosen.push(n);
    }
    if chosen.first() != Some(&1) {
        return Err(s3_error!(
            InvalidPart,
            "kura needs part 1 in every upload: it carries the object header"
        ));
    }
    if chosen.windows(2).any(|w| w[0] >= w[1]) {
        return Err(s3_error!(
            InvalidPartOrder,
            "parts must be listed in ascending order"
        ));
    }
    Ok(())
}

/// The plaintext layout of the parts a completion lists (`parts`, their ETags in upstream
/// form), from the stored part sizes. Each listed part is pinned to the stored part whose
/// size the layout takes (see [`pin`]).
async fn completed_layout(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    upstream_id: &str,
    parts: &mut [CompletedPart],
) -> S3Result<Vec<PartInfo>> {
    let stored = stored_parts(gw, bucket, key, upstream_id).await?;
    let mut layout = Vec::with_capacity(parts.len());
    for part in parts {
        // check_part_order made sure every part has a number.
        let Some(n) = part.part_number.and_then(|n| u32::try_from(n).ok()) else {
            continue;
        };
        let found = stored
            .iter()
            .find(|s| s.number == n)
            .ok_or_else(|| s3_error!(InvalidPart, "part {n} was not uploaded"))?;
        pin(part, n, found.e_tag.as_ref())?;
        layout.push(PartInfo {
            number: n,
            len: part_plaintext_len(n, found.size)?,
        });
    }
    Ok(layout)
}

/// Ties a part a completion lists to the stored part the layout was computed from, where the
/// upstream lists part ETags: an ETag the client gave must be that part's, and a part given
/// without one is completed with it. A part uploaded again after the gateway's ListParts
/// then makes the completion fail (here, or upstream, which checks part ETags) instead of
/// completing an object whose layout describes the part it replaced.
fn pin(part: &mut CompletedPart, number: u32, stored: Option<&ETag>) -> S3Result<()> {
    let Some(stored) = stored else {
        return Ok(());
    };
    match &part.e_tag {
        Some(given) if given.value() != stored.value() => Err(s3_error!(
            InvalidPart,
            "part {number}'s ETag is not that of the part stored under its number"
        )),
        Some(_) => Ok(()),
        None => {
            part.e_tag = Some(stored.clone());
            Ok(())
        }
    }
}

pub(super) async fn complete(
    gw: &Gateway,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let mut input = req.input;
    check_key(&input.key)?;
    let (upstream_id, secrets, cipher) =
        upload_id::decode(&gw.keys(), &input.bucket, &input.key, &input.upload_id)?;
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    check_part_order(&input)?;
    let parts = input
        .multipart_upload
        .as_mut()
        .and_then(|m| m.parts.as_mut())
        .map(Vec::as_mut_slice)
        .unwrap_or_default();
    for p in parts.iter_mut() {
        // Part ETags were handed out in client form (etag.rs); the upstream wants its own.
        p.e_tag = p
            .e_tag
            .take()
            .map(|e| ETag::Strong(etag::to_upstream_value(e.value())));
        p.checksum_crc32 = None;
        p.checksum_crc32c = None;
        p.checksum_crc64nvme = None;
        p.checksum_sha1 = None;
        p.checksum_sha256 = None;
    }
    let layout = completed_layout(gw, &bucket, &key, &upstream_id, parts).await?;
    // Check the layout before anything is completed upstream (SPEC 5.3 rules).
    Layout::table(&layout).map_err(|e| s3_error!(InvalidPart, "{e}"))?;
    // x-amz-mp-object-size names the plaintext total; the upstream would compare it with
    // the stored one, so it is checked here and not sent.
    if let Some(expected) = input.mpu_object_size {
        let total: u64 = layout.iter().map(|p| p.len).sum();
        if u64::try_from(expected).ok() != Some(total) {
            return Err(s3_error!(
                InvalidRequest,
                "x-amz-mp-object-size is {expected}, the parts hold {total} bytes"
            ));
        }
    }
    let up = CompleteMultipartUploadInput {
        upload_id: upstream_id,
        checksum_crc32: None,
        checksum_crc32c: None,
        checksum_crc64nvme: None,
        checksum_sha1: None,
        checksum_sha256: None,
        checksum_type: None,
        mpu_object_size: None,
        if_match: upstream_condition(input.if_match.take()),
        if_none_match: upstream_condition(input.if_none_match.take()),
        ..input
    };
    // The completion (upstream, then the trailer rewrite of an irregular layout) runs as a
    // task of its own: a client that goes away does not cut it short, which would leave an
    // irregular object without its trailer. A client that waits gets its answer with its
    // own status if it comes within COMPLETION_PROMPT, else 200 at once, keep-alive
    // whitespace (as S3 sends) and the answer or an error in the body at the end.
    let payload = secrets.payload_key(cipher);
    let mut completion = tokio::spawn({
        let gw = gw.clone();
        async move {
            let out = gw
                .upstream
                .s3()
                .complete_multipart_upload(request(up))
                .await?
                .output;
            completed(&gw, (bucket, key), layout, &payload, out).await
        }
    });
    let joined = |r: Result<S3Result<CompleteMultipartUploadOutput>, tokio::task::JoinError>| {
        r.map_err(|e| s3_error!(InternalError, "completion: {e}"))?
    };
    match tokio::time::timeout(COMPLETION_PROMPT, &mut completion).await {
        Ok(r) => Ok(S3Response::new(joined(r)?)),
        Err(_) => Ok(S3Response::new(CompleteMultipartUploadOutput {
            future: Some(Box::pin(async move { joined(completion.await) })),
            ..Default::default()
        })),
    }
}

/// The client's answer to an upload the upstream completed (`out`): for an irregular
/// layout, after the trailer rewrite.
async fn completed(
    gw: &Gateway,
    (bucket, key): (String, String),
    layout: Vec<PartInfo>,
    payload: &PayloadKey,
    out: CompleteMultipartUploadOutput,
) -> S3Result<CompleteMultipartUploadOutput> {
    forget(gw, &bucket, &key).await;
    if is_regular(&layout) {
        return Ok(CompleteMultipartUploadOutput {
            bucket: Some(bucket),
            key: Some(key),
            e_tag: out.e_tag.as_ref().map(etag::to_client),
            version_id: out.version_id,
            location: out.location,
            ..Default::default()
        });
    }
    let result = append_trailer(
        gw,
        &bucket,
        &key,
        payload,
        &layout,
        (out.e_tag.clone(), out.version_id.clone()),
    )
    .await;
    forget(gw, &bucket, &key).await;
    let (e_tag, version_id) = result?;
    Ok(CompleteMultipartUploadOutput {
        bucket: Some(bucket),
        key: Some(key),
        e_tag: Some(etag::to_client(&e_tag)),
        version_id,
        location: out.location,
        ..Default::default()
    })
}

/// Rewrites a completed irregular object with its layout trailer appended: a server-side
/// multipart copy of the body (no bytes through the gateway) plus one small last part.
#[allow(
    clippy::too_many_lines,
    reason = "one S3 operation, read top to bottom"
)]
async fn append_trailer(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    payload: &PayloadKey,
    parts: &[PartInfo],
    (source_etag, source_version): (Option<ETag>, Option<String>),
) -> S3Result<(ETag, Option<String>)> {
    let table = Layout::table(parts).map_err(keys_error)?;
    let body_len = table.body_len_without_trailer();
    let trailer = kura_keys::trailer::encode(payload, parts, body_len).map_err(keys_error)?;
    let head = gw
        .upstream
        .s3()
        .head_object(request(HeadObjectInput {
            bucket: bucket.into(),
            key: key.into(),
            version_id: source_version.clone(),
            ..Default::default()
        }))
        .await?
        .output;
    let create = CreateMultipartUploadInput {
        bucket: bucket.into(),
        key: key.into(),
        metadata: head.metadata,
        content_type: head.content_type,
        cache_control: head.cache_control,
        content_disposition: head.content_disposition,
        content_encoding: head.content_encoding,
        content_language: head.content_language,
        expires: head.expires,
        website_redirect_location: head.website_redirect_location,
        server_side_encryption: head.server_side_encryption,
        ssekms_key_id: head.ssekms_key_id,
        bucket_key_enabled: head.bucket_key_enabled,
        storage_class: head.storage_class,
        object_lock_mode: head.object_lock_mode,
        object_lock_retain_until_date: head.object_lock_retain_until_date,
        object_lock_legal_hold_status: head.object_lock_legal_hold_status,
        ..Default::default()
    };
    let upload = OwnUpload::start(gw, create).await?;
    let id = upload.id();
    let result = async {
        // Only the object this upload completed, never a later write.
        let from = CopyFrom {
            bucket,
            key,
            version: source_version.as_deref(),
            etag: source_etag,
        };
        let mut completed = copy_parts(gw, (bucket, key, id), &from, 0..body_len, 1).await?;
        let number = i32::try_from(completed.len() + 1)
            .map_err(|_| s3_error!(InternalError, "too many parts"))?;
        let len = trailer.len();
        let part = UploadPartInput {
            bucket: bucket.into(),
            key: key.into(),
            upload_id: id.into(),
            part_number: number,
            content_length: Some(i64::try_from(len).unwrap_or(i64::MAX)),
            body: Some(StreamingBlob::from(s3s::Body::from(bytes::Bytes::from(
                trailer.clone(),
            )))),
            ..Default::default()
        };
        let out = gw.upstream.s3().upload_part(request(part)).await?.output;
        completed.push(CompletedPart {
            e_tag: out.e_tag,
            part_number: Some(number),
            ..Default::default()
        });
        let out = complete_own(gw, (bucket, key, id), completed, (None, None)).await?;
        let etag = out
            .e_tag
            .ok_or_else(|| s3_error!(InternalError, "no ETag"))?;
        Ok((etag, out.version_id))
    }
    .await;
    upload.finish(result).await
}

#[cfg(test)]
mod tests {
    use s3s::S3ErrorCode;
    use s3s::dto::{CompleteMultipartUploadInput, CompletedMultipartUpload, CompletedPart, ETag};

    use super::{check_part_order, pin};

    fn part(number: i32, e_tag: Option<&str>) -> CompletedPart {
        CompletedPart {
            part_number: Some(number),
            e_tag: e_tag.map(|e| ETag::Strong(e.into())),
            ..Default::default()
        }
    }

    #[test]
    fn a_listed_part_is_pinned_to_the_stored_part() {
        let stored = ETag::Strong("aaa".into());
        let mut given = part(2, Some("aaa"));
        pin(&mut given, 2, Some(&stored)).unwrap();
        assert_eq!(given.e_tag.unwrap().value(), "aaa");

        // Uploaded again between the client's completion list and the gateway's ListParts.
        let mut other = part(2, Some("bbb"));
        let err = pin(&mut other, 2, Some(&stored)).unwrap_err();
        assert_eq!(*err.code(), S3ErrorCode::InvalidPart);

        // No ETag from the client: completed with the one the layout was taken from.
        let mut bare = part(2, None);
        pin(&mut bare, 2, Some(&stored)).unwrap();
        assert_eq!(bare.e_tag.unwrap().value(), "aaa");

        // An upstream that lists no part ETags (s3s-fs) leaves the part as it was.
        let mut unlisted = part(2, None);
        pin(&mut unlisted, 2, None).unwrap();
        assert!(unlisted.e_tag.is_none());
    }

    #[test]
    fn completions_list_numbered_parts_from_1_ascending() {
        let check = |parts: Vec<CompletedPart>| {
            check_part_order(&CompleteMultipartUploadInput {
                multipart_upload: Some(CompletedMultipartUpload { parts: Some(parts) }),
                ..Default::default()
            })
            .map_err(|e| e.code().clone())
        };
        assert_eq!(check(vec![part(1, None), part(3, None)]), Ok(()));
        assert_eq!(check(vec![part(2, None)]), Err(S3ErrorCode::InvalidPart));
        assert_eq!(check(vec![]), Err(S3ErrorCode::InvalidPart));
        assert_eq!(
            check(vec![part(1, None), part(3, None), part(2, None)]),
            Err(S3ErrorCode::InvalidPartOrder)
        );
        assert_eq!(
            check(vec![part(1, None), part(1, None)]),
            Err(S3ErrorCode::InvalidPartOrder)
        );
        let mut unnumbered = part(2, None);
        unnumbered.part_number = None;
        assert_eq!(
            check(vec![part(1, None), unnumbered]),
            Err(S3ErrorCode::InvalidPart)
        );
        assert_eq!(
            check(vec![part(1, None), part(-2, None)]),
            Err(S3ErrorCode::InvalidPart)
        );
    }
}

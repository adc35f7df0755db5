//! PutObject with Object Lock headers: the upstream (B2, AWS) wants `Content-MD5` of what it
//! stores, which is ciphertext the gateway produces as it streams. Such uploads go up in
//! parts of [`PART`] bytes, each buffered (bounded memory) so its MD5 can lead the request;
//! a body of at most one part is a single PUT. The kura body is the same bytes either way:
//! the format does not care where the store cuts its parts.

#![allow(clippy::wildcard_imports, reason = "the S3 DTO namespace")]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::*;
use s3s::{S3Error, S3Result, s3_error};

use crate::gateway::Gateway;
use crate::upstream::request;

/// Ciphertext bytes per buffered part (above S3's 5 MiB minimum).
pub(super) const PART: usize = 8 << 20;

/// Whether a PUT carries Object Lock settings.
pub(super) fn has_object_lock(input: &PutObjectInput) -> bool {
    input.object_lock_mode.is_some()
        || input.object_lock_retain_until_date.is_some()
        || input.object_lock_legal_hold_status.is_some()
}

pub(super) fn md5_b64(b: &[u8]) -> String {
    B64.encode(Md5::checksum(b))
}

/// Reads up to `PART` bytes of `blob` into one buffer.
async fn next_part(blob: &mut StreamingBlob, carry: &mut Option<Bytes>) -> S3Result<Option<Bytes>> {
    let mut buf = BytesMut::with_capacity(PART);
    if let Some(c) = carry.take() {
        buf.extend_from_slice(&c);
    }
    while buf.len() < PART {
        match blob.next().await {
            Some(Ok(mut b)) => {
                let take = (PART - buf.len()).min(b.len());
                buf.extend_from_slice(&b.split_to(take));
                if !b.is_empty() {
                    *carry = Some(b);
                }
            }
            Some(Err(e)) => return Err(S3Error::with_source(s3s::S3ErrorCode::InternalError, e)),
            None => break,
        }
    }
    Ok((!buf.is_empty()).then(|| buf.freeze()))
}

/// Reads the whole of `blob`, which is `len` bytes of at most [`PART`].
pub(super) async fn read_all(mut blob: StreamingBlob, len: u64) -> S3Result<Bytes> {
    let mut carry = None;
    let body = next_part(&mut blob, &mut carry).await?.unwrap_or_default();
    if body.len() as u64 != len || carry.is_some() {
        return Err(s3_error!(
            InternalError,
            "upstream sent {} bytes, not {len}",
            body.len()
        ));
    }
    Ok(body)
}

/// Stores `blob` (ciphertext of `len` bytes) with `template`'s settings, each request
/// carrying the MD5 of its body.
pub(super) async fn put_with_object_lock(
    gw: &Gateway,
    template: PutObjectInput,
    mut blob: StreamingBlob,
    len: u64,
) -> S3Result<PutObjectOutput> {
    let mut carry = None;
    if len <= PART as u64 {
        let body = next_part(&mut blob, &mut carry).await?.unwrap_or_default();
        let put = PutObjectInput {
            content_md5: Some(md5_b64(&body)),
            content_length: Some(i64::try_from(body.len()).unwrap_or(i64::MAX)),
            body: Some(StreamingBlob::from(s3s::Body::from(body))),
            ..template
        };
        return Ok(gw.upstream.s3().put_object(request(put)).await?.output);
    }
    let create = super::own_upload::create_like(&template);
    // The client's conditions hold for the write as a whole: the completion carries them.
    let conditions = (template.if_match.clone(), template.if_none_match.clone());
    let (bucket, key) = (template.bucket, template.key);
    let upload = super::own_upload::OwnUpload::start(gw, create).await?;
    let id = upload.id();
    let result = async {
        let mut parts = Vec::new();
        let mut number = 1;
        while let Some(body) = next_part(&mut blob, &mut carry).await? {
            let part = UploadPartInput {
                bucket: bucket.clone(),
                key: key.clone(),
                upload_id: id.into(),
                part_number: number,
                content_md5: Some(md5_b64(&body)),
                content_length: Some(i64::try_from(body.len()).unwrap_or(i64::MAX)),
                body: Some(StreamingBlob::from(s3s::Body::from(body))),
                ..Default::default()
            };
            let out = gw.upstream.s3().upload_part(request(part)).await?.output;
            parts.push(CompletedPart {
                e_tag: out.e_tag,
                part_number: Some(number),
                ..Default::default()
            });
            number += 1;
        }
        let out =
            super::own_upload::complete_own(gw, (&bucket, &key, id), parts, conditions).await?;
        Ok(PutObjectOutput {
            e_tag: out.e_tag,
            version_id: out.version_id,
            ..Default::default()
        })
    }
    .await;
    upload.finish(result).await
}

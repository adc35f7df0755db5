//! Locating a stored object: its header read and verified, its layout found (from its size,
//! or its trailer), and both kept in the gateway's cache of [`Located`] objects, checked
//! against the upstream ETag on use and forgotten after a write through this gateway.

use std::sync::Arc;

use futures::StreamExt as _;
use kura_keys::format::HEADER_SIZE;
use kura_keys::{Header, Layout, ObjectName, SizeInfo, VerifiedHeader};
use s3s::dto::{GetObjectInput, Range, StreamingBlob};
use s3s::{S3Error, S3Result, s3_error};

use crate::error::keys_error;
use crate::gateway::{Gateway, Located};
use crate::upstream::request;

async fn get_range(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    start: u64,
    end: u64,
    if_match: Option<&str>,
) -> S3Result<s3s::dto::GetObjectOutput> {
    let input = GetObjectInput {
        bucket: bucket.into(),
        key: key.into(),
        version_id: version_id.map(Into::into),
        range: Some(Range::Int {
            first: start,
            last: Some(end),
        }),
        if_match: if_match.map(|e| s3s::dto::ETagCondition::ETag(s3s::dto::ETag::Strong(e.into()))),
        ..Default::default()
    };
    gw.upstream
        .s3()
        .get_object(request(input))
        .await
        .map(|r| r.output)
}

async fn collect(blob: Option<StreamingBlob>, limit: usize) -> S3Result<Vec<u8>> {
    let mut out = Vec::new();
    let Some(mut blob) = blob else { return Ok(out) };
    while let Some(chunk) = blob.next().await {
        let chunk = chunk.map_err(|e| S3Error::with_source(s3s::S3ErrorCode::InternalError, e))?;
        if out.len() + chunk.len() > limit {
            return Err(s3_error!(
                InternalError,
                "upstream sent more than was asked for"
            ));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The stored (ciphertext) length an upstream reported.
pub(crate) fn stored_len(content_length: Option<i64>) -> S3Result<u64> {
    content_length
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| s3_error!(InternalError, "upstream sent no length"))
}

/// The total size a `Content-Range` answer names (`bytes a-b/total`).
pub(crate) fn total_from_content_range(cr: Option<&str>) -> Option<u64> {
    cr?.rsplit_once('/')?.1.parse().ok()
}

/// Finds, verifies and caches an object's header and layout (two small range reads on a
/// miss: the header, and the trailer when the size says there is one).
pub(crate) async fn locate(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<Arc<Located>> {
    locate_current(gw, bucket, key, version_id, None).await
}

/// [`locate`], for a request whose conditions (`hold`) are checked against what it finds.
/// A check that fails on a cached entry is checked again against a fresh look: the object
/// may have been replaced by another replica, or by a writer going straight to the
/// upstream, and a client that read the new ETag with HEAD must not be refused for ever.
pub(crate) async fn locate_checked(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    hold: impl Fn(&Located) -> S3Result<()>,
) -> S3Result<Arc<Located>> {
    let located = locate(gw, bucket, key, version_id).await?;
    if hold(&located).is_ok() {
        return Ok(located);
    }
    unlocate(gw, bucket, key, version_id).await;
    let located = locate(gw, bucket, key, version_id).await?;
    hold(&located)?;
    Ok(located)
}

/// Drops what the cache holds for an object (its current version, and `version_id`).
pub(crate) async fn unlocate(gw: &Gateway, bucket: &str, key: &str, version_id: Option<&str>) {
    forget(gw, bucket, key).await;
    gw.located
        .invalidate(&(
            bucket.to_string(),
            key.to_string(),
            version_id.map(str::to_string),
        ))
        .await;
}

/// [`locate`] of the object whose upstream ETag is `etag` (when given): a cached entry
/// counts only if it is that object's, and the reads are pinned to it (another replica, or
/// a writer going straight to the upstream, may have replaced the object). An object
/// replaced since the caller saw `etag` is 503 SlowDown, which clients retry.
pub(crate) async fn locate_current(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    etag: Option<&str>,
) -> S3Result<Arc<Located>> {
    match try_locate(gw, bucket, key, version_id, etag).await {
        Err(LocateError::Upstream(e)) if etag.is_some() && is_precondition_failed(&e) => {
            Err(changed_while_read())
        }
        r => Ok(r?),
    }
}

const CHANGED_WHILE_READ: &str = "the object changed while it was being read; try again";

/// The answer to a read pinned to an ETag the object no longer has (it was replaced
/// meanwhile): 503 SlowDown, which clients retry.
pub(crate) fn changed_while_read() -> S3Error {
    S3Error::with_message(s3s::S3ErrorCode::SlowDown, CHANGED_WHILE_READ)
}

/// Whether `e` is [`changed_while_read`]'s answer (a HEAD then asks again itself).
pub(crate) fn is_changed_while_read(e: &S3Error) -> bool {
    *e.code() == s3s::S3ErrorCode::SlowDown && e.message() == Some(CHANGED_WHILE_READ)
}

/// Whether the upstream refused a read pinned with If-Match.
pub(crate) fn is_precondition_failed(e: &S3Error) -> bool {
    *e.code() == s3s::S3ErrorCode::PreconditionFailed
}

/// Why [`try_locate`] has no object to give.
pub(crate) enum LocateError {
    /// Reading from the upstream failed: its error answer (after the retries), or a body
    /// that broke off. Trying again later may succeed.
    Upstream(S3Error),
    /// The upstream's bytes are not a kura object (no kura magic): another writer's.
    Foreign(S3Error),
    /// The bytes are kura's, but do not open here: a header that does not verify (damaged,
    /// moved from another object, under a key not in the key file) or a damaged layout.
    Unverified(S3Error),
}

impl From<LocateError> for S3Error {
    fn from(e: LocateError) -> Self {
        match e {
            LocateError::Upstream(e) | LocateError::Foreign(e) | LocateError::Unverified(e) => e,
        }
    }
}

/// What [`locate_unless_foreign`] found.
pub(crate) enum Seen {
    /// A kura object whose header verified.
    Kura(Arc<Located>),
    /// Another writer's bytes.
    Foreign,
    /// Kura's bytes that do not open here, with why.
    Unverified(S3Error),
}

/// Why stored bytes did not open, as [`Gateway::unreadable`] remembers it.
#[derive(Clone)]
pub(crate) enum Unopened {
    Foreign,
    /// Kura's: the error's code and message, to answer with again while the key file is
    /// the one they were found with (a key added to it since may open them).
    Unverified(s3s::S3ErrorCode, Option<String>, Arc<kura_keys::Keyring>),
}

/// [`try_locate`] for a caller that must tell a kura object from another writer's
/// (listings, a HEAD): bytes that do not open are remembered by `identity` (the stored
/// bytes' ETag, or what else tells them apart) and not read again while it holds; the
/// upstream's error when the read itself failed.
pub(crate) async fn locate_unless_foreign(
    gw: &Gateway,
    (bucket, key, version_id): (&str, &str, Option<&str>),
    etag: Option<&str>,
    identity: Option<&str>,
) -> S3Result<Seen> {
    let known = identity.map(|identity| {
        let version = version_id.map(str::to_string);
        (
            bucket.to_string(),
            key.to_string(),
            version,
            identity.to_string(),
        )
    });
    if let Some(k) = &known
        && let Some(why) = gw.unreadable.get(k).await
    {
        match why {
            Unopened::Foreign => return Ok(Seen::Foreign),
            Unopened::Unverified(code, message, keys) if Arc::ptr_eq(&keys, &gw.keys()) => {
                return Ok(Seen::Unverified(match message {
                    Some(m) => S3Error::with_message(code, m),
                    None => S3Error::new(code),
                }));
            }
            Unopened::Unverified(..) => {}
        }
    }
    let (seen, why) = match try_locate(gw, bucket, key, version_id, etag).await {
        Ok(located) => return Ok(Seen::Kura(located)),
        Err(LocateError::Upstream(e)) => return Err(e),
        Err(LocateError::Foreign(e)) => {
            tracing::warn!(bucket, key, error = %e, "the object is not kura's; its stored size and metadata are shown");
            (Seen::Foreign, Unopened::Foreign)
        }
        Err(LocateError::Unverified(e)) => {
            tracing::warn!(bucket, key, error = %e, "a kura object that does not open; listings show its stored size");
            let why =
                Unopened::Unverified(e.code().clone(), e.message().map(str::to_string), gw.keys());
            (Seen::Unverified(e), why)
        }
    };
    if let Some(k) = known {
        gw.unreadable.insert(k, why).await;
    }
    Ok(seen)
}

/// [`locate_current`], telling a failed upstream read from bytes that are not kura's.
pub(crate) async fn try_locate(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    etag: Option<&str>,
) -> Result<Arc<Located>, LocateError> {
    use LocateError::{Foreign, Unverified, Upstream};
    let cache_key = (
        bucket.to_string(),
        key.to_string(),
        version_id.map(str::to_string),
    );
    if let Some(hit) = gw.located.get(&cache_key).await {
        if etag.is_none() || hit.upstream_etag.as_deref() == etag {
            return Ok(hit);
        }
        gw.located.invalidate(&cache_key).await;
    }
    // Pinned to the object the caller saw, when it names one: sizes and ETags must not
    // come from two different objects.
    let head = get_range(gw, bucket, key, version_id, 0, HEADER_SIZE as u64 - 1, etag)
        .await
        .map_err(Upstream)?;
    // A store that ignores If-Match on reads (s3s-fs) answers with what it holds now.
    if let Some(want) = etag
        && head.e_tag.as_ref().is_some_and(|got| got.value() != want)
    {
        return Err(Upstream(s3_error!(
            PreconditionFailed,
            "the object changed since its ETag was read"
        )));
    }
    let ciphertext_len = total_from_content_range(head.content_range.as_deref())
        .or_else(|| head.content_length.and_then(|n| u64::try_from(n).ok()))
        .ok_or_else(|| {
            Upstream(s3_error!(
                InternalError,
                "upstream did not report the object size"
            ))
        })?;
    let upstream_etag = head.e_tag.as_ref().map(|e| e.value().to_string());
    let last_modified = head.last_modified.clone();
    let bytes = collect(head.body, HEADER_SIZE).await.map_err(Upstream)?;
    // Bytes that begin with kura's magic are kura's, whatever else is wrong with them:
    // a HEAD must not take them for another writer's and show metadata stored in the
    // clear beside them (SPEC 7).
    let kura = bytes.starts_with(&kura_keys::format::MAGIC);
    let format = |e: kura_keys::Error| {
        if kura {
            Unverified(keys_error(e))
        } else {
            Foreign(keys_error(e))
        }
    };
    let name = ObjectName::new(bucket, key).map_err(format)?;
    let verified = Header::parse(&bytes)
        .and_then(|h| h.verify(&gw.keys(), &name))
        .map_err(format)?;
    let part_size = verified.header().part_size();
    let commitment = verified.secrets().commitment();
    let payload = Arc::new(verified.into_payload_key());
    let layout = match kura_keys::plaintext_size(ciphertext_len).map_err(format)? {
        SizeInfo::Aligned(size) => Layout::regular(size, part_size).map_err(format)?,
        SizeInfo::Trailer => {
            let tail = get_range(
                gw,
                bucket,
                key,
                version_id,
                ciphertext_len - 8,
                ciphertext_len - 1,
                upstream_etag.as_deref(),
            )
            .await
            .map_err(Upstream)?;
            let last8: [u8; 8] = collect(tail.body, 8)
                .await
                .map_err(Upstream)?
                .try_into()
                .map_err(|_| Upstream(s3_error!(InternalError, "short trailer read")))?;
            let len = kura_keys::trailer::trailer_len(&last8, ciphertext_len).map_err(format)?;
            let t = get_range(
                gw,
                bucket,
                key,
                version_id,
                ciphertext_len - len,
                ciphertext_len - 1,
                upstream_etag.as_deref(),
            )
            .await
            .map_err(Upstream)?;
            let bytes = collect(t.body, usize::try_from(len).unwrap_or(usize::MAX))
                .await
                .map_err(Upstream)?;
            kura_keys::trailer::decode(&payload, &bytes, ciphertext_len).map_err(format)?
        }
    };
    let located = Arc::new(Located {
        key: payload,
        commitment,
        layout,
        upstream_etag,
        last_modified,
    });
    gw.located.insert(cache_key, located.clone()).await;
    Ok(located)
}

/// Forgets a cached object (after a write or delete through this gateway).
pub(crate) async fn forget(gw: &Gateway, bucket: &str, key: &str) {
    gw.located
        .invalidate(&(bucket.to_string(), key.to_string(), None))
        .await;
}

/// Reads the header at the start of a body stream and verifies it for `bucket`/`key`;
/// returns it with the bytes already read past it and the rest of the stream.
pub(crate) async fn verify_body_header(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    blob: Option<StreamingBlob>,
) -> S3Result<(VerifiedHeader, bytes::Bytes, StreamingBlob)> {
    let blob = blob.ok_or_else(|| s3_error!(InternalError, "upstream sent no body"))?;
    let (head, rest, blob) = crate::body::read_prefix(blob, HEADER_SIZE).await?;
    let name = ObjectName::new(bucket, key).map_err(keys_error)?;
    let verified = Header::parse(&head)
        .and_then(|h| h.verify(&gw.keys(), &name))
        .map_err(keys_error)?;
    Ok((verified, rest, blob))
}

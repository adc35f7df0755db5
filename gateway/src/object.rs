//! What the gateway knows about a stored object: its verified header and layout
//! (`Located`), the plaintext sizes of listed objects, and its sealed user metadata.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use futures::StreamExt as _;
use kura_keys::format::HEADER_SIZE;
use kura_keys::{
    Cipher, Header, Layout, ObjectName, ObjectSecrets, PayloadKey, SizeInfo, VerifiedHeader,
};
use s3s::dto::{GetObjectInput, Metadata, Range, StreamingBlob, Timestamp};
use s3s::{S3Error, S3Result, s3_error};

use crate::error::keys_error;
use crate::gateway::Gateway;
use crate::upstream::request;

/// Metadata names (after `x-amz-meta-`) the gateway owns (SPEC 7).
pub(crate) const META_SEALED: &str = kura_keys::SEALED_METADATA_NAME;
pub(crate) const META_KEY: &str = "kura-key";

/// Checks an object key the way S3 would before it reaches a filesystem upstream.
pub(crate) fn check_key(key: &str) -> S3Result<()> {
    if key.is_empty() || key.len() > 1024 {
        return Err(s3_error!(
            KeyTooLongError,
            "object keys are 1 to 1024 bytes"
        ));
    }
    if key.split('/').any(|seg| seg == ".." || seg == ".") || key.starts_with('/') {
        // s3s-fs maps keys to paths; `..` would reach other buckets and its sidecar files.
        return Err(s3_error!(
            InvalidArgument,
            "object keys with `.` or `..` segments are not accepted"
        ));
    }
    Ok(())
}

/// What a listed object's stored size says about its plaintext size (SPEC 6.1).
pub(crate) enum ListedSize {
    /// The size alone tells: this many bytes, if the object is kura's.
    Known(i64),
    /// Only the object's trailer tells.
    InTrailer,
    /// Too short for any kura object: another writer's, listed as stored.
    Foreign,
}

pub(crate) fn listed_size(ciphertext_len: i64) -> ListedSize {
    let info = u64::try_from(ciphertext_len)
        .ok()
        .map(kura_keys::plaintext_size);
    match info {
        Some(Ok(SizeInfo::Aligned(n))) => {
            i64::try_from(n).map_or(ListedSize::Foreign, ListedSize::Known)
        }
        Some(Ok(SizeInfo::Trailer)) => ListedSize::InTrailer,
        _ => ListedSize::Foreign,
    }
}

/// An object whose header verified, with the keys and layout to read any byte of it.
pub(crate) struct Located {
    pub(crate) key: Arc<PayloadKey>,
    /// The object's `COMMITMENT` (SPEC 3), which its metadata's header copy must share.
    pub(crate) commitment: [u8; kura_keys::format::KEY_SIZE],
    pub(crate) layout: Layout,
    pub(crate) upstream_etag: Option<String>,
    pub(crate) last_modified: Option<Timestamp>,
}

impl Located {
    /// The plaintext size.
    pub(crate) fn size(&self) -> u64 {
        self.layout.size()
    }
}

/// Seals user metadata for an object with `secrets`, adding the header copy that lets a
/// HEAD open it without reading the body. `cipher` must be the one `header` names: readers
/// open the metadata with the header copy's cipher, and a copy keeps its source's cipher
/// whatever the gateway now seals new objects with.
pub(crate) fn seal_metadata(
    secrets: &ObjectSecrets,
    cipher: Cipher,
    header: &[u8; HEADER_SIZE],
    user: Option<Metadata>,
) -> S3Result<Metadata> {
    let mut out = Metadata::new();
    let pairs: Vec<(String, String)> = user
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !is_reserved(k))
        .collect();
    if !pairs.is_empty() {
        let sealed = secrets
            .seal_metadata(cipher, &pairs)
            .map_err(|e| s3_error!(InvalidArgument, "metadata: {e}"))?;
        out.insert(META_SEALED.into(), sealed);
    }
    out.insert(META_KEY.into(), B64.encode(header));
    Ok(out)
}

fn is_reserved(name: &str) -> bool {
    name.eq_ignore_ascii_case(META_SEALED) || name.eq_ignore_ascii_case(META_KEY)
}

/// Verifies the header copy in an object's metadata.
pub(crate) fn metadata_header(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    meta: Option<&Metadata>,
) -> S3Result<Option<VerifiedHeader>> {
    let Some(b64) = meta.and_then(|m| m.get(META_KEY)) else {
        return Ok(None);
    };
    let bytes = B64
        .decode(b64)
        .map_err(|_| s3_error!(InternalError, "stored object metadata is damaged"))?;
    let name = ObjectName::new(bucket, key).map_err(keys_error)?;
    Header::parse(&bytes)
        .and_then(|h| h.verify(&gw.keyring, &name))
        .map(Some)
        .map_err(keys_error)
}

/// The user metadata of an object, opened; the gateway's own entries removed.
pub(crate) fn open_metadata(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    meta: Option<Metadata>,
) -> S3Result<Option<Metadata>> {
    let sealed = meta.as_ref().is_some_and(|m| m.contains_key(META_SEALED));
    let verified = if sealed {
        metadata_header(gw, bucket, key, meta.as_ref())?
    } else {
        None
    };
    open_metadata_with(verified.as_ref(), meta)
}

/// [`open_metadata`] for a read whose body belongs to the object with `commitment`: the
/// metadata's header copy must wrap the same data key (SPEC 7), or it was swapped in from
/// another object (or another version of this one).
pub(crate) fn open_metadata_of(
    gw: &Gateway,
    (bucket, key): (&str, &str),
    meta: Option<Metadata>,
    commitment: &[u8; kura_keys::format::KEY_SIZE],
) -> S3Result<Option<Metadata>> {
    let meta_header = metadata_header(gw, bucket, key, meta.as_ref())?;
    if meta_header
        .as_ref()
        .is_some_and(|m| m.secrets().commitment() != *commitment)
    {
        return Err(s3_error!(
            InternalError,
            "the stored object's metadata belongs to another object"
        ));
    }
    open_metadata_with(meta_header.as_ref(), meta)
}

/// [`open_metadata`] with the metadata's header copy already verified (by
/// [`metadata_header`]), so that a caller that checked it need not verify it again.
pub(crate) fn open_metadata_with(
    verified: Option<&VerifiedHeader>,
    meta: Option<Metadata>,
) -> S3Result<Option<Metadata>> {
    let Some(meta) = meta else { return Ok(None) };
    let Some(sealed) = meta.get(META_SEALED) else {
        let rest: Metadata = meta.into_iter().filter(|(k, _)| !is_reserved(k)).collect();
        return Ok((!rest.is_empty()).then_some(rest));
    };
    let verified = verified
        .ok_or_else(|| s3_error!(InternalError, "sealed metadata without its key header"))?;
    let pairs = verified
        .secrets()
        .open_metadata(verified.header().cipher(), sealed)
        .map_err(keys_error)?;
    Ok(Some(pairs.into_iter().collect()))
}

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
        Err(LocateError::Upstream(e))
            if etag.is_some() && *e.code() == s3s::S3ErrorCode::PreconditionFailed =>
        {
            Err(s3_error!(
                SlowDown,
                "the object changed while it was being read; try again"
            ))
        }
        r => Ok(r?),
    }
}

/// Why [`try_locate`] has no object to give.
pub(crate) enum LocateError {
    /// Reading from the upstream failed: its error answer (after the retries), or a body
    /// that broke off. Trying again later may succeed.
    Upstream(S3Error),
    /// The upstream's bytes are no object this gateway can open: another writer's, one
    /// under a key not in the key file, or damaged.
    Unreadable(S3Error),
}

impl From<LocateError> for S3Error {
    fn from(e: LocateError) -> Self {
        match e {
            LocateError::Upstream(e) | LocateError::Unreadable(e) => e,
        }
    }
}

/// [`locate_current`], telling a failed upstream read from bytes that are not kura's.
pub(crate) async fn try_locate(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    etag: Option<&str>,
) -> Result<Arc<Located>, LocateError> {
    use LocateError::{Unreadable, Upstream};
    let format = |e: kura_keys::Error| Unreadable(keys_error(e));
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
    let name = ObjectName::new(bucket, key).map_err(format)?;
    let verified = Header::parse(&bytes)
        .and_then(|h| h.verify(&gw.keyring, &name))
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
        .and_then(|h| h.verify(&gw.keyring, &name))
        .map_err(keys_error)?;
    Ok((verified, rest, blob))
}

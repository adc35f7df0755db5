//! The gateway's own upstream multipart uploads (not a client's): a large CopyObject, a
//! locked PutObject above one part, an irregular completion's trailer rewrite. Each is
//! aborted unless it completed, whether its work failed or the client went away: hyper
//! drops a handler's future when its client disconnects, and an upload left open holds
//! every part stored so far (billed by S3 and B2, and invisible in listings). Also what
//! those uploads share: server-side copies of stored bytes into them, and their completion.

use s3s::dto::{
    AbortMultipartUploadInput, CompleteMultipartUploadInput, CompleteMultipartUploadOutput,
    CompletedMultipartUpload, CompletedPart, CopySource, CreateMultipartUploadInput, ETag,
    ETagCondition, PutObjectInput, UploadPartCopyInput,
};
use s3s::{S3Result, s3_error};

use crate::gateway::Gateway;
use crate::upstream::request;

/// Largest piece of a server-side copy: S3 allows 5 GiB per UploadPartCopy, B2 5 GB.
const MAX_COPY_PART: u64 = 5_000_000_000;

/// An open upload of the gateway's own; aborted when dropped before [`OwnUpload::finish`].
pub(super) struct OwnUpload {
    gw: Gateway,
    bucket: String,
    key: String,
    id: String,
    /// Cleared by `finish`, which settles the upload itself.
    open: bool,
}

impl OwnUpload {
    /// Starts an upload upstream.
    pub(super) async fn start(gw: &Gateway, create: CreateMultipartUploadInput) -> S3Result<Self> {
        let (bucket, key) = (create.bucket.clone(), create.key.clone());
        let id = gw
            .upstream
            .s3()
            .create_multipart_upload(request(create))
            .await?
            .output
            .upload_id
            .ok_or_else(|| s3_error!(InternalError, "no upload ID"))?;
        Ok(Self {
            gw: gw.clone(),
            bucket,
            key,
            id,
            open: true,
        })
    }

    /// The upstream's upload ID.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Passes on `result`, the outcome of the work that should have completed the upload;
    /// when it is an error, first aborts the upload so that no parts are left behind.
    pub(super) async fn finish<T>(mut self, result: S3Result<T>) -> S3Result<T> {
        self.open = false;
        if result.is_err() {
            abort(&self.gw, &self.bucket, &self.key, &self.id).await;
        }
        result
    }
}

impl Drop for OwnUpload {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        // The future that held the upload was dropped mid-way. Aborting an upload that
        // the upstream has completed meanwhile is answered NoSuchUpload and changes nothing.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (gw, bucket, key, id) = (
            self.gw.clone(),
            std::mem::take(&mut self.bucket),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.id),
        );
        runtime.spawn(async move { abort(&gw, &bucket, &key, &id).await });
    }
}

async fn abort(gw: &Gateway, bucket: &str, key: &str, id: &str) {
    let abort = AbortMultipartUploadInput {
        bucket: bucket.into(),
        key: key.into(),
        upload_id: id.into(),
        ..Default::default()
    };
    if let Err(e) = gw
        .upstream
        .s3()
        .abort_multipart_upload(request(abort))
        .await
    {
        tracing::warn!(bucket, key, error = %e, "could not abort the gateway's own upload");
    }
}

/// Completes the gateway's own upstream upload `id` of `(bucket, key)` with `parts`, under
/// the client's write conditions (`if_match`, `if_none_match`, in upstream terms) when the
/// upload stands for a client's single write.
pub(super) async fn complete_own(
    gw: &Gateway,
    (bucket, key, id): (&str, &str, &str),
    parts: Vec<CompletedPart>,
    (if_match, if_none_match): (Option<ETagCondition>, Option<ETagCondition>),
) -> S3Result<CompleteMultipartUploadOutput> {
    let done = CompleteMultipartUploadInput {
        bucket: bucket.into(),
        key: key.into(),
        upload_id: id.into(),
        multipart_upload: Some(CompletedMultipartUpload { parts: Some(parts) }),
        if_match,
        if_none_match,
        ..Default::default()
    };
    Ok(gw
        .upstream
        .s3()
        .complete_multipart_upload(request(done))
        .await?
        .output)
}

/// A stored object a server-side copy reads, pinned to the version and upstream ETag the
/// gateway saw, so that a write racing the copy is refused instead of mixed in.
pub(super) struct CopyFrom<'a> {
    pub(super) bucket: &'a str,
    pub(super) key: &'a str,
    pub(super) version: Option<&'a str>,
    pub(super) etag: Option<ETag>,
}

/// Splits stored bytes `range` into the inclusive byte ranges of pieces of at most `max`
/// bytes, as equal as can be: with more than one piece, each is at least `max / 2`, far
/// above S3's 5 MiB minimum part.
fn pieces(range: std::ops::Range<u64>, max: u64) -> Vec<(u64, u64)> {
    let len = range.end.saturating_sub(range.start);
    if len == 0 {
        return Vec::new();
    }
    let n = len.div_ceil(max);
    // The first `len % n` pieces take one byte more: all differ by at most one byte, so no
    // piece before the last is a runt (the next part of an upload may follow it).
    let (base, extra) = (len / n, len % n);
    let mut out = Vec::new();
    let mut offset = range.start;
    for i in 0..n {
        let end = offset + base + u64::from(i < extra);
        out.push((offset, end - 1));
        offset = end;
    }
    out
}

/// Copies stored bytes `range` of `from` server-side into upload `id` of `(bucket, key)`
/// (UploadPartCopy; no byte passes through the gateway), as parts numbered from `number`.
pub(super) async fn copy_parts(
    gw: &Gateway,
    (bucket, key, id): (&str, &str, &str),
    from: &CopyFrom<'_>,
    range: std::ops::Range<u64>,
    mut number: i32,
) -> S3Result<Vec<CompletedPart>> {
    // Unpinned, a write racing the copy would mix another object's segments in after this
    // one's header: an object that never opens, stored with a 200.
    let pin = from.etag.clone().ok_or_else(|| {
        s3_error!(
            InternalError,
            "the upstream named no ETag for the copy source, so its server-side copy cannot be pinned to it"
        )
    })?;
    let mut completed = Vec::new();
    for (first, last) in pieces(range, MAX_COPY_PART) {
        let copy = UploadPartCopyInput::builder()
            .bucket(bucket.into())
            .key(key.into())
            .copy_source(CopySource::Bucket {
                bucket: from.bucket.into(),
                key: from.key.into(),
                version_id: from.version.map(Into::into),
            })
            .copy_source_if_match(Some(ETagCondition::ETag(pin.clone())))
            .copy_source_range(Some(format!("bytes={first}-{last}")))
            .part_number(number)
            .upload_id(id.into())
            .build()
            .map_err(|e| s3_error!(InternalError, "{e}"))?;
        let out = gw
            .upstream
            .s3()
            .upload_part_copy(request(copy))
            .await?
            .output;
        completed.push(CompletedPart {
            e_tag: out.copy_part_result.and_then(|r| r.e_tag),
            part_number: Some(number),
            ..Default::default()
        });
        number += 1;
    }
    Ok(completed)
}

/// The CreateMultipartUpload that stores an object as `put` would, in parts.
pub(super) fn create_like(put: &PutObjectInput) -> CreateMultipartUploadInput {
    CreateMultipartUploadInput {
        bucket: put.bucket.clone(),
        key: put.key.clone(),
        metadata: put.metadata.clone(),
        content_type: put.content_type.clone(),
        content_encoding: put.content_encoding.clone(),
        content_disposition: put.content_disposition.clone(),
        cache_control: put.cache_control.clone(),
        content_language: put.content_language.clone(),
        expires: put.expires.clone(),
        website_redirect_location: put.website_redirect_location.clone(),
        tagging: put.tagging.clone(),
        storage_class: put.storage_class.clone(),
        object_lock_mode: put.object_lock_mode.clone(),
        object_lock_retain_until_date: put.object_lock_retain_until_date.clone(),
        object_lock_legal_hold_status: put.object_lock_legal_hold_status.clone(),
        server_side_encryption: put.server_side_encryption.clone(),
        ssekms_key_id: put.ssekms_key_id.clone(),
        ssekms_encryption_context: put.ssekms_encryption_context.clone(),
        bucket_key_enabled: put.bucket_key_enabled,
        acl: put.acl.clone(),
        grant_full_control: put.grant_full_control.clone(),
        grant_read: put.grant_read.clone(),
        grant_read_acp: put.grant_read_acp.clone(),
        grant_write_acp: put.grant_write_acp.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn pieces_cover_the_range_in_equal_bounded_parts() {
        assert!(pieces(5..5, 10).is_empty());
        assert_eq!(pieces(0..10, 10), [(0, 9)]);
        assert_eq!(pieces(3..14, 10), [(3, 8), (9, 13)]);
        assert_eq!(pieces(8..38, 10), [(8, 17), (18, 27), (28, 37)]);
        assert_eq!(pieces(0..21, 10), [(0, 6), (7, 13), (14, 20)]);
        for (start, end, max) in [(0, 1, 1), (7, 1000, 33), (100, 10_000_007, 4_999)] {
            let p = pieces(start..end, max);
            assert_eq!(p.first().unwrap().0, start);
            assert_eq!(p.last().unwrap().1, end - 1);
            for w in p.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0, "contiguous");
            }
            for &(a, b) in &p {
                assert!(b - a < max, "at most max bytes");
                if p.len() > 1 {
                    assert!(b - a + 1 >= max / 2, "none much smaller than the others");
                }
            }
        }
    }
}

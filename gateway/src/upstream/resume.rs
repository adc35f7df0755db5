//! An upstream GET body that breaks off (a reset connection, a stall cut by `stall.rs`) is
//! picked up where it broke: the rest is asked for again as a range, pinned with If-Match
//! to the upstream ETag (and version) of the first answer, so that what follows is the
//! same stored object. The SDK retries whole calls, but once a body has started to reach
//! the client no call can be retried from the start; without this a hiccup of the
//! upstream halfway through a large restore costs the client the whole read.
//!
//! Nothing here can splice in wrong plaintext: the bytes are ciphertext, and the opener
//! that follows authenticates every segment against the object's key and position.

use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use s3s::StdError;
use s3s::dto::{ETag, ETagCondition, GetObjectInput, Range, StreamingBlob};

use super::{Upstream, request};

/// Times one body is picked up again before its error goes to the client.
pub(crate) const MAX_RESUMES: u32 = 3;

/// Where a body came from, and the stored bytes it still owes.
pub(crate) struct Origin {
    /// The upstream to ask again.
    pub(crate) upstream: Upstream,
    /// Bucket of the object.
    pub(crate) bucket: String,
    /// Key of the object.
    pub(crate) key: String,
    /// The version the first answer was, if the bucket keeps versions.
    pub(crate) version_id: Option<String>,
    /// The upstream's ETag of the first answer (unquoted).
    pub(crate) upstream_etag: String,
    /// Offset in the stored object of the body's next byte.
    pub(crate) next: u64,
    /// Offset in the stored object of the body's last byte.
    pub(crate) last: u64,
}

struct State {
    origin: Origin,
    body: Option<StreamingBlob>,
    resumes_left: u32,
}

/// `body`, which holds the stored bytes `origin.next..=origin.last`, with its breaks mended.
pub(crate) fn resuming(
    body: StreamingBlob,
    origin: Origin,
) -> impl Stream<Item = Result<Bytes, StdError>> + Send + 'static {
    let state = State {
        origin,
        body: Some(body),
        resumes_left: MAX_RESUMES,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            let body = st.body.as_mut()?;
            match body.next().await {
                Some(Ok(bytes)) => {
                    st.origin.next += bytes.len() as u64;
                    return Some((Ok(bytes), st));
                }
                None => return None,
                Some(Err(e)) => {
                    if st.resumes_left == 0 || st.origin.next > st.origin.last {
                        st.body = None;
                        return Some((Err(e), st));
                    }
                    st.resumes_left -= 1;
                    st.origin.upstream.retries.add("GetObject");
                    tracing::warn!(
                        bucket = %st.origin.bucket,
                        key = %st.origin.key,
                        offset = st.origin.next,
                        error = %e,
                        "upstream body broke off; asking for the rest"
                    );
                    match refetch(&st.origin).await {
                        Ok(rest) => st.body = Some(rest),
                        Err(why) => {
                            tracing::warn!(key = %st.origin.key, %why, "could not pick the body up again");
                            st.body = None;
                            return Some((Err(e), st));
                        }
                    }
                }
            }
        }
    })
}

/// The stored bytes `origin.next..=origin.last` of the same object, asked for again.
async fn refetch(origin: &Origin) -> Result<StreamingBlob, String> {
    let input = GetObjectInput {
        bucket: origin.bucket.clone(),
        key: origin.key.clone(),
        version_id: origin.version_id.clone(),
        range: Some(Range::Int {
            first: origin.next,
            last: Some(origin.last),
        }),
        if_match: Some(ETagCondition::ETag(ETag::Strong(
            origin.upstream_etag.clone(),
        ))),
        ..Default::default()
    };
    let out = origin
        .upstream
        .s3()
        .get_object(request(input))
        .await
        .map_err(|e| e.to_string())?
        .output;
    if out.e_tag.as_ref().map(ETag::value) != Some(origin.upstream_etag.as_str()) {
        return Err(format!(
            "the object changed: ETag {:?}, was {:?}",
            out.e_tag, origin.upstream_etag
        ));
    }
    let want = origin.last - origin.next + 1;
    // An upstream that ignored the Range would send the object from its start.
    if out.content_length.and_then(|n| u64::try_from(n).ok()) != Some(want) {
        return Err(format!(
            "asked for {want} bytes, the upstream answered {:?}",
            out.content_length
        ));
    }
    out.body
        .ok_or_else(|| "the upstream sent no body".to_string())
}

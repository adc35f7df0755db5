//! Listings: ListObjects V1 and V2 (always V2 upstream: B2's V1 cannot page past 1000
//! keys) and ListObjectVersions, with plaintext sizes and client ETags. Sizes of aligned
//! objects come from the listed size alone; an object with a trailer costs its header and
//! trailer reads once (then the cache), up to 16 objects of a page at a time; one that
//! turns out not to be kura's is remembered by ETag and not read again.
//!
//! `encoding-type=url` (botocore asks for it on every listing) is answered here, not
//! forwarded: the gateway needs the real keys to read trailers (a header is bound to its
//! object's name), and s3s-fs echoes the parameter without encoding anything, so a client
//! would decode names that were never encoded. The fields encoded are those S3 encodes
//! and botocore decodes.

#![allow(
    clippy::wildcard_imports,
    reason = "the S3 DTO namespace: each operation touches many of its types"
)]

use kura_keys::SizeInfo;
use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result, s3_error};

use crate::etag;
use crate::gateway::Gateway;
use crate::object::{Seen, locate_unless_foreign};
use crate::upstream::request;

/// What a listed object's stored size says about its plaintext size (SPEC 6.1).
enum ListedSize {
    /// The size alone tells: this many bytes, if the object is kura's.
    Known(i64),
    /// Only the object's trailer tells.
    InTrailer,
    /// Too short for any kura object: another writer's, listed as stored.
    Foreign,
}

fn listed_size(ciphertext_len: i64) -> ListedSize {
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

/// Bytes a listing leaves as they are under `encoding-type=url`: the unreserved ones of RFC
/// 3986 and `/`. Everything else, `+` and `%` included, is percent-encoded, which
/// botocore's `unquote_plus` turns back.
const LISTING_KEEPS: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Whether a listing request asked for `encoding-type=url`.
fn wants_url(encoding: Option<&EncodingType>) -> bool {
    encoding.is_some_and(|e| e.as_str() == EncodingType::URL)
}

fn encode(v: &mut Option<String>) {
    if let Some(s) = v {
        *s = percent_encoding::utf8_percent_encode(s, LISTING_KEEPS).to_string();
    }
}

fn encode_prefixes(prefixes: Option<&mut Vec<CommonPrefix>>) {
    for p in prefixes.into_iter().flatten() {
        encode(&mut p.prefix);
    }
}

/// S3 treats an empty `delimiter=` or `prefix=` as absent; rclone and restic send them.
fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// How many listed objects of one page are read at once for their sizes: enough that a
/// page of planted objects is not 1,000 serial reads, few enough that one listing cannot
/// take the upstream connection pool.
const LOOKUPS_PER_PAGE: usize = 16;

/// A listed object's plaintext size. An object with a trailer is read (header and
/// trailer); if those bytes are not an object the gateway can open, its stored size is
/// reported, as for any object another writer put there, and remembered by ETag so that
/// later listings do not read it again. If the read itself fails, so does the listing: a
/// size made up from the stored one would be wrong for a kura object, and clients such as
/// rclone act on listed sizes.
async fn plaintext_size(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version: Option<&str>,
    stored: Option<i64>,
    etag: Option<&str>,
    modified: Option<&Timestamp>,
) -> S3Result<Option<i64>> {
    let Some(stored) = stored else {
        return Ok(None);
    };
    match listed_size(stored) {
        ListedSize::Known(n) => return Ok(Some(n)),
        ListedSize::Foreign => return Ok(Some(stored)),
        ListedSize::InTrailer => {}
    }
    // The stored bytes' identity: their ETag, or (from a store that lists none, as
    // s3s-fs) their size and modification time.
    let identity = etag
        .map(str::to_string)
        .or_else(|| modified.map(|t| format!("{stored} bytes, modified {t:?}")));
    match locate_unless_foreign(gw, (bucket, key, version), etag, identity.as_deref()).await {
        Ok(Seen::Kura(l)) => Ok(i64::try_from(l.size()).ok()),
        Ok(Seen::Foreign | Seen::Unverified(_)) => Ok(Some(stored)),
        Err(e) => Err(changed_while_listed(e)),
    }
}

/// What the upstream listed of one object (or version).
struct Listed {
    key: Option<String>,
    version: Option<String>,
    stored: Option<i64>,
    etag: Option<String>,
    modified: Option<Timestamp>,
}

/// The plaintext sizes of a page's objects, read [`LOOKUPS_PER_PAGE`] at a time, in the
/// page's order.
async fn plaintext_sizes(
    gw: &Gateway,
    bucket: &str,
    listed: Vec<Listed>,
) -> S3Result<Vec<Option<i64>>> {
    use futures::{StreamExt as _, TryStreamExt as _};
    futures::stream::iter(listed)
        .map(|l| async move {
            match &l.key {
                Some(key) => {
                    let (version, etag) = (l.version.as_deref(), l.etag.as_deref());
                    let modified = l.modified.as_ref();
                    plaintext_size(gw, bucket, key, version, l.stored, etag, modified).await
                }
                None => Ok(l.stored),
            }
        })
        .buffered(LOOKUPS_PER_PAGE)
        .try_collect()
        .await
}

/// An upstream read that failed during a listing, as the listing's error. Gone (404) or
/// replaced (412) means the object changed after the upstream listed it: 503 SlowDown,
/// which every S3 client retries, and the retry lists what is there now. Other errors
/// keep their own code.
fn changed_while_listed(e: S3Error) -> S3Error {
    match e.status_code().map(|s| s.as_u16()) {
        Some(404 | 412) => s3_error!(
            SlowDown,
            "an object changed while it was being listed; list again"
        ),
        _ => e,
    }
}

async fn map_objects(
    gw: &Gateway,
    bucket: &str,
    contents: Option<Vec<Object>>,
) -> S3Result<Option<Vec<Object>>> {
    let Some(mut contents) = contents else {
        return Ok(None);
    };
    let listed = contents
        .iter()
        .map(|o| Listed {
            key: o.key.clone(),
            version: None,
            stored: o.size,
            etag: o.e_tag.as_ref().map(|e| e.value().to_string()),
            modified: o.last_modified.clone(),
        })
        .collect();
    let sizes = plaintext_sizes(gw, bucket, listed).await?;
    for (o, size) in contents.iter_mut().zip(sizes) {
        o.size = size;
        o.e_tag = o.e_tag.as_ref().map(etag::to_client);
        o.checksum_algorithm = None;
        o.checksum_type = None;
    }
    Ok(Some(contents))
}

pub(super) async fn list_objects_v2(
    gw: &Gateway,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let mut input = req.input;
    // Echoed as the client sent them, whatever the upstream makes of them: a given prefix
    // (also an empty one) as Prefix, a non-empty delimiter and start-after as themselves.
    let given = (
        input.prefix.clone(),
        non_empty(input.delimiter.clone()),
        non_empty(input.start_after.clone()),
    );
    input.delimiter = non_empty(input.delimiter);
    input.prefix = non_empty(input.prefix);
    input.start_after = non_empty(input.start_after);
    let url = wants_url(input.encoding_type.take().as_ref());
    let bucket = input.bucket.clone();
    let mut out = gw
        .upstream
        .s3()
        .list_objects_v2(request(input))
        .await?
        .output;
    (out.prefix, out.delimiter, out.start_after) = given;
    out.contents = map_objects(gw, &bucket, out.contents.take()).await?;
    out.encoding_type = None;
    if url {
        out.encoding_type = Some(EncodingType::from_static(EncodingType::URL));
        encode(&mut out.delimiter);
        encode(&mut out.prefix);
        encode(&mut out.start_after);
        for o in out.contents.iter_mut().flatten() {
            encode(&mut o.key);
        }
        encode_prefixes(out.common_prefixes.as_mut());
    }
    Ok(S3Response::new(out))
}

pub(super) async fn list_objects(
    gw: &Gateway,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = req.input;
    let up = ListObjectsV2Input {
        bucket: input.bucket.clone(),
        delimiter: non_empty(input.delimiter.clone()),
        prefix: non_empty(input.prefix.clone()),
        start_after: non_empty(input.marker.clone()),
        max_keys: input.max_keys,
        ..Default::default()
    };
    let out = gw.upstream.s3().list_objects_v2(request(up)).await?.output;
    let contents = map_objects(gw, &input.bucket, out.contents).await?;
    let truncated = out.is_truncated.unwrap_or(false);
    // V1 has no continuation token: the next marker is the greatest key or prefix returned.
    let last_key = contents
        .as_ref()
        .and_then(|c| c.last())
        .and_then(|o| o.key.clone());
    let last_prefix = out
        .common_prefixes
        .as_ref()
        .and_then(|p| p.last())
        .and_then(|p| p.prefix.clone());
    let next_marker = truncated
        .then(|| last_key.into_iter().chain(last_prefix).max())
        .flatten();
    let mut output = ListObjectsOutput {
        name: Some(input.bucket),
        prefix: input.prefix,
        delimiter: non_empty(input.delimiter),
        marker: non_empty(input.marker),
        max_keys: out.max_keys,
        is_truncated: Some(truncated),
        next_marker,
        contents,
        common_prefixes: out.common_prefixes,
        ..Default::default()
    };
    if wants_url(input.encoding_type.as_ref()) {
        output.encoding_type = Some(EncodingType::from_static(EncodingType::URL));
        encode(&mut output.prefix);
        encode(&mut output.delimiter);
        encode(&mut output.marker);
        encode(&mut output.next_marker);
        for o in output.contents.iter_mut().flatten() {
            encode(&mut o.key);
        }
        encode_prefixes(output.common_prefixes.as_mut());
    }
    Ok(S3Response::new(output))
}

pub(super) async fn list_object_versions(
    gw: &Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let mut input = req.input;
    let given = (input.prefix.clone(), non_empty(input.delimiter.clone()));
    input.delimiter = non_empty(input.delimiter);
    input.prefix = non_empty(input.prefix);
    let url = wants_url(input.encoding_type.take().as_ref());
    let bucket = input.bucket.clone();
    let mut out = gw
        .upstream
        .s3()
        .list_object_versions(request(input))
        .await?
        .output;
    (out.prefix, out.delimiter) = given;
    if let Some(versions) = &mut out.versions {
        let listed = versions
            .iter()
            .map(|v| Listed {
                key: v.key.clone(),
                version: v.version_id.clone(),
                stored: v.size,
                etag: v.e_tag.as_ref().map(|e| e.value().to_string()),
                modified: v.last_modified.clone(),
            })
            .collect();
        let sizes = plaintext_sizes(gw, &bucket, listed).await?;
        for (v, size) in versions.iter_mut().zip(sizes) {
            v.size = size;
            v.e_tag = v.e_tag.as_ref().map(etag::to_client);
            v.checksum_algorithm = None;
            v.checksum_type = None;
        }
    }
    out.encoding_type = None;
    if url {
        out.encoding_type = Some(EncodingType::from_static(EncodingType::URL));
        encode(&mut out.delimiter);
        encode(&mut out.prefix);
        encode(&mut out.key_marker);
        encode(&mut out.next_key_marker);
        for v in out.versions.iter_mut().flatten() {
            encode(&mut v.key);
        }
        for m in out.delete_markers.iter_mut().flatten() {
            encode(&mut m.key);
        }
        encode_prefixes(out.common_prefixes.as_mut());
    }
    Ok(S3Response::new(out))
}

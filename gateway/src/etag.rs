//! The ETag contract.
//!
//! A client sees one ETag per object, the same in the PUT response, HEAD, GET, listings,
//! CopyObject results and If-Match checks: the upstream's ETag of the stored (encrypted)
//! object, made to look like a multipart ETag when it is not one already.
//!
//! Why: an upstream single-part ETag is the MD5 of the ciphertext. rclone, s3cmd and others
//! take a 32-hex ETag for the MD5 of the content and fail when it differs from the
//! plaintext's; an ETag with a `-N` suffix tells them it is not an MD5. Computing the real
//! plaintext MD5 instead would cost MD5 on every upload (the slowest primitive on the path,
//! 0.3-0.6 GB/s here) and could not appear in listings, which carry no metadata. This
//! mapping is free and needs nothing but the upstream's listing.
//!
//! Mapping: an upstream ETag that already ends in `-<digits>` (multipart) is kept; any
//! other gets `-0`, a part count S3 never produces. The inverse strips `-0`.
//!
//! Part ETags (UploadPart, UploadPartCopy, ListParts) follow the same mapping, and
//! CompleteMultipartUpload maps them back: s3cmd compares a part's 32-hex ETag with the MD5
//! of the plaintext part it sent and retries, then gives up, when they differ.

use s3s::dto::{ETag, ETagCondition};

const SINGLE_PART_SUFFIX: &str = "-0";

fn is_multipart(value: &str) -> bool {
    value
        .rsplit_once('-')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && n != "0")
}

/// The client-visible ETag value for an upstream ETag value (no quotes).
#[must_use]
pub(crate) fn to_client_value(upstream: &str) -> String {
    if is_multipart(upstream) {
        upstream.to_string()
    } else {
        format!("{upstream}{SINGLE_PART_SUFFIX}")
    }
}

/// The client-visible ETag value of an object whose upstream ETag is `upstream` (empty if
/// the upstream sent none).
#[must_use]
pub(crate) fn client_value_of(upstream: Option<&ETag>) -> String {
    upstream
        .map(|e| to_client_value(e.value()))
        .unwrap_or_default()
}

/// The client-visible ETag for an upstream ETag.
#[must_use]
pub(crate) fn to_client(upstream: &ETag) -> ETag {
    ETag::Strong(to_client_value(upstream.value()))
}

/// The upstream ETag value a client ETag value names.
#[must_use]
pub(crate) fn to_upstream_value(client: &str) -> String {
    client
        .strip_suffix(SINGLE_PART_SUFFIX)
        .unwrap_or(client)
        .to_string()
}

/// Whether a client's If-Match / If-None-Match condition matches the object's client ETag.
#[must_use]
pub(crate) fn condition_matches(cond: &ETagCondition, client_etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == client_etag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_part_etags_stop_looking_like_md5_and_map_back() {
        let md5 = "d41d8cd98f00b204e9800998ecf8427e";
        let client = to_client_value(md5);
        assert_eq!(client, format!("{md5}-0"));
        assert_eq!(to_upstream_value(&client), md5);
    }

    #[test]
    fn multipart_etags_are_kept() {
        assert_eq!(to_client_value("abc-12"), "abc-12");
        assert_eq!(to_upstream_value("abc-12"), "abc-12");
        // Not a part count: treated as single part.
        assert_eq!(to_client_value("abc-x1"), "abc-x1-0");
    }
}

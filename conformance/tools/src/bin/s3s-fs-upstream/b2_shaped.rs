//! `--b2-shaped`: the upstream answers as Backblaze B2's S3-compatible API would, refusing
//! with B2's error codes every request B2 refuses (../shared/NOTES.md section 3, and
//! Backblaze's "S3 Compatible API" documentation), before s3s-fs sees it:
//!
//! - SigV4 only: SigV2 headers and presigned URLs are refused;
//! - no `x-amz-checksum-*`, `x-amz-sdk-checksum-algorithm`, `x-amz-checksum-mode`, nor a
//!   trailer naming a checksum (400 "Unsupported header");
//! - a PutObject, UploadPart or CreateMultipartUpload with Object Lock settings, or a part of
//!   such an upload, needs Content-MD5;
//! - parts numbered 1 to 10,000, at most 5 GB each, and at least 5 MB each but the last
//!   (EntityTooSmall at completion);
//! - no object ACLs beyond the bucket's (`private`), no grants, no tagging;
//! - only the calls B2 lists; any other is 501 NotImplemented.
//!
//! What kura sends that this refuses is a bug in kura (issue 24): the rules here follow B2,
//! never kura.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;

/// B2's smallest part but the last: 5 MB (Backblaze counts in decimal units).
const MIN_PART: u64 = 5_000_000;
/// B2's largest part: 5 GB.
const MAX_PART: u64 = 5_000_000_000;
const MAX_PART_NUMBER: u64 = 10_000;

/// What the rules remember between requests: part sizes by upload and part number, and the
/// uploads created with Object Lock settings (whose parts need Content-MD5).
#[derive(Default, Clone)]
pub struct B2Shaped {
    parts: Arc<Mutex<HashMap<(String, u64), u64>>>,
    locked_uploads: Arc<Mutex<HashSet<String>>>,
}

/// A refusal, as B2 words it.
pub struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

fn refuse(status: StatusCode, code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        code,
        message: message.into(),
    }
}

impl Refusal {
    pub fn into_response(self) -> Response<s3s::Body> {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message></Error>",
            self.code, self.message
        );
        let mut r = Response::new(s3s::Body::from(body));
        *r.status_mut() = self.status;
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/xml"),
        );
        r
    }
}

/// The S3 operations B2 serves, by what a path-style request looks like.
fn operation(method: &Method, has_key: bool, query: &HashSet<String>) -> Option<&'static str> {
    let q = |k: &str| query.contains(k);
    let op = match (method.as_str(), has_key) {
        ("GET", false) if q("acl") => "GetBucketAcl",
        ("GET", false) if q("cors") => "GetBucketCors",
        ("GET", false) if q("location") => "GetBucketLocation",
        ("GET", false) if q("versioning") => "GetBucketVersioning",
        ("GET", false) if q("object-lock") => "GetObjectLockConfiguration",
        ("GET", false) if q("encryption") => "GetBucketEncryption",
        ("GET", false) if q("versions") => "ListObjectVersions",
        ("GET", false) if q("uploads") => "ListMultipartUploads",
        ("GET", false) if q("list-type") => "ListObjectsV2",
        ("GET", false) => "ListObjects",
        ("HEAD", false) => "HeadBucket",
        ("PUT", false) if q("acl") => "PutBucketAcl",
        ("PUT", false) if q("cors") => "PutBucketCors",
        ("PUT", false) if q("object-lock") => "PutObjectLockConfiguration",
        ("PUT", false) if q("encryption") => "PutBucketEncryption",
        ("PUT", false) if query.is_empty() => "CreateBucket",
        ("DELETE", false) if q("cors") => "DeleteBucketCors",
        ("DELETE", false) if q("encryption") => "DeleteBucketEncryption",
        ("DELETE", false) if query.is_empty() => "DeleteBucket",
        ("POST", false) if q("delete") => "DeleteObjects",
        ("GET", true) if q("acl") => "GetObjectAcl",
        ("GET", true) if q("retention") => "GetObjectRetention",
        ("GET", true) if q("legal-hold") => "GetObjectLegalHold",
        ("GET", true) if q("uploadId") => "ListParts",
        ("GET", true) if !has_any(query, &["tagging", "attributes", "torrent"]) => "GetObject",
        ("HEAD", true) => "HeadObject",
        ("PUT", true) if q("retention") => "PutObjectRetention",
        ("PUT", true) if q("legal-hold") => "PutObjectLegalHold",
        ("PUT", true) if q("uploadId") && q("partNumber") => "UploadPart",
        ("PUT", true) if !has_any(query, &["acl", "tagging"]) => "PutObject",
        ("DELETE", true) if q("uploadId") => "AbortMultipartUpload",
        ("DELETE", true) if !q("tagging") => "DeleteObject",
        ("POST", true) if q("uploads") => "CreateMultipartUpload",
        ("POST", true) if q("uploadId") => "CompleteMultipartUpload",
        _ => return None,
    };
    Some(op)
}

fn has_any(query: &HashSet<String>, keys: &[&str]) -> bool {
    keys.iter().any(|k| query.contains(*k))
}

fn query_map(uri: &http::Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn header<'a>(parts: &'a http::request::Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

/// The headers B2 refuses on any call: SigV2, checksums, grants, tags, ACLs but `private`.
fn check_headers(
    parts: &http::request::Parts,
    query: &HashMap<String, String>,
) -> Result<(), Refusal> {
    let bad = StatusCode::BAD_REQUEST;
    if header(parts, "authorization").is_some_and(|a| a.starts_with("AWS "))
        || query.contains_key("AWSAccessKeyId")
    {
        return Err(refuse(
            bad,
            "InvalidRequest",
            "Signature V2 is not supported: use Signature V4",
        ));
    }
    for name in parts.headers.keys() {
        let n = name.as_str();
        if n.starts_with("x-amz-checksum-")
            || n == "x-amz-sdk-checksum-algorithm"
            || n == "x-amz-checksum-algorithm"
        {
            return Err(refuse(
                bad,
                "InvalidArgument",
                format!("Unsupported header '{n}' received for this API call."),
            ));
        }
        if n.starts_with("x-amz-grant-") || n == "x-amz-tagging" {
            return Err(refuse(
                bad,
                "InvalidArgument",
                format!("Unsupported header '{n}' received for this API call."),
            ));
        }
    }
    if header(parts, "x-amz-trailer").is_some_and(|t| t.contains("checksum")) {
        return Err(refuse(
            bad,
            "InvalidArgument",
            "Unsupported header 'x-amz-trailer' received for this API call.",
        ));
    }
    if header(parts, "x-amz-acl").is_some_and(|a| a != "private") {
        return Err(refuse(
            bad,
            "InvalidArgument",
            "only the bucket's ACL applies to its objects",
        ));
    }
    Ok(())
}

impl B2Shaped {
    /// The refusal B2 would answer `parts` with, before its body is read.
    fn check_head(&self, parts: &http::request::Parts) -> Result<&'static str, Refusal> {
        let bad = StatusCode::BAD_REQUEST;
        let query = query_map(&parts.uri);
        check_headers(parts, &query)?;
        let path = parts.uri.path().trim_start_matches('/');
        let has_key = path.split_once('/').is_some_and(|(_, k)| !k.is_empty());
        let keys: HashSet<String> = query.keys().cloned().collect();
        let op = operation(&parts.method, has_key, &keys).ok_or_else(|| {
            refuse(
                StatusCode::NOT_IMPLEMENTED,
                "NotImplemented",
                format!("{} {} is not supported", parts.method, parts.uri.path()),
            )
        })?;
        let locked = parts.headers.contains_key("x-amz-object-lock-mode")
            || parts.headers.contains_key("x-amz-object-lock-legal-hold");
        let md5 = parts.headers.contains_key("content-md5");
        match op {
            "PutObject" if locked && !md5 => {
                return Err(refuse(
                    bad,
                    "InvalidRequest",
                    "Content-MD5 is required for a PUT with Object Lock settings",
                ));
            }
            "UploadPart" => {
                let number: u64 = query
                    .get("partNumber")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                if !(1..=MAX_PART_NUMBER).contains(&number) {
                    return Err(refuse(
                        bad,
                        "InvalidArgument",
                        "Part number must be an integer between 1 and 10000, inclusive",
                    ));
                }
                let id = query.get("uploadId").cloned().unwrap_or_default();
                if !md5 && self.locked_uploads.lock().unwrap().contains(&id) {
                    return Err(refuse(
                        bad,
                        "InvalidRequest",
                        "Content-MD5 is required for a part of an upload with Object Lock settings",
                    ));
                }
                let size = part_size(parts);
                if size.is_some_and(|s| s > MAX_PART) {
                    return Err(refuse(
                        bad,
                        "EntityTooLarge",
                        "Your proposed upload exceeds the maximum allowed size",
                    ));
                }
                if let Some(size) = size {
                    self.parts.lock().unwrap().insert((id, number), size);
                }
            }
            _ => {}
        }
        Ok(op)
    }

    /// Checks a request and, where B2 would serve it, passes it to `inner`.
    pub async fn serve(
        &self,
        req: Request<Incoming>,
        inner: s3s::service::S3Service,
    ) -> Result<Response<s3s::Body>, s3s::HttpError> {
        let (parts, body) = req.into_parts();
        let op = match self.check_head(&parts) {
            Ok(op) => op,
            Err(refusal) => return Ok(refusal.into_response()),
        };
        let query = query_map(&parts.uri);
        let body = if op == "CompleteMultipartUpload" {
            let bytes = body
                .collect()
                .await
                .map_err(|e| s3s::HttpError::new(Box::new(e)))?
                .to_bytes();
            let id = query.get("uploadId").cloned().unwrap_or_default();
            if let Err(refusal) = self.check_completion(&id, &bytes) {
                return Ok(refusal.into_response());
            }
            s3s::Body::from(bytes)
        } else {
            s3s::Body::from(body)
        };
        let locked = parts.headers.contains_key("x-amz-object-lock-mode")
            || parts.headers.contains_key("x-amz-object-lock-legal-hold");
        let resp = inner.call(Request::from_parts(parts, body)).await?;
        if op == "CreateMultipartUpload" && locked && resp.status().is_success() {
            let (head, body) = resp.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(s3s::HttpError::new)?
                .to_bytes();
            if let Some(id) = upload_id_of(&bytes) {
                self.locked_uploads.lock().unwrap().insert(id);
            }
            return Ok(Response::from_parts(head, s3s::Body::from(bytes)));
        }
        Ok(resp)
    }

    /// EntityTooSmall for a completion that lists a part under 5 MB before its last.
    fn check_completion(&self, upload_id: &str, xml: &Bytes) -> Result<(), Refusal> {
        let text = String::from_utf8_lossy(xml);
        let numbers: Vec<u64> = text
            .split("<PartNumber>")
            .skip(1)
            .filter_map(|s| s.split('<').next()?.trim().parse().ok())
            .collect();
        let sizes = self.parts.lock().unwrap();
        let Some((_, rest)) = numbers.split_last() else {
            return Ok(());
        };
        for n in rest {
            if sizes
                .get(&(upload_id.to_string(), *n))
                .is_some_and(|s| *s < MIN_PART)
            {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    "EntityTooSmall",
                    format!(
                        "Your proposed upload is smaller than the minimum allowed object size (part {n})"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The size of an uploaded part: the decoded length of an aws-chunked body, else its
/// Content-Length; for UploadPartCopy, the copied range.
fn part_size(parts: &http::request::Parts) -> Option<u64> {
    if let Some(range) = header(parts, "x-amz-copy-source-range") {
        let (a, b) = range.trim_start_matches("bytes=").split_once('-')?;
        return Some(b.parse::<u64>().ok()? - a.parse::<u64>().ok()? + 1);
    }
    header(parts, "x-amz-decoded-content-length")
        .or_else(|| header(parts, "content-length"))
        .and_then(|v| v.parse().ok())
}

fn upload_id_of(xml: &Bytes) -> Option<String> {
    let text = String::from_utf8_lossy(xml);
    let start = text.find("<UploadId>")? + "<UploadId>".len();
    let end = text[start..].find("</UploadId>")? + start;
    Some(text[start..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(method: &str, key: bool, query: &[&str]) -> Option<&'static str> {
        let q = query.iter().map(|s| (*s).to_string()).collect();
        operation(&method.parse().unwrap(), key, &q)
    }

    #[test]
    fn calls_b2_does_not_list_are_not_implemented() {
        assert_eq!(ops("PUT", true, &["tagging"]), None);
        assert_eq!(ops("PUT", true, &["acl"]), None);
        assert_eq!(ops("GET", true, &["attributes"]), None);
        assert_eq!(ops("PUT", false, &["lifecycle"]), None);
        assert_eq!(ops("PUT", false, &["versioning"]), None);
        assert_eq!(ops("POST", true, &["restore"]), None);
        assert_eq!(
            ops("PUT", true, &["uploadId", "partNumber"]),
            Some("UploadPart")
        );
        assert_eq!(ops("GET", false, &["list-type"]), Some("ListObjectsV2"));
    }
}

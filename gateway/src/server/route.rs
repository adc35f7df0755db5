//! Routing one request: the admin endpoints where they are served, POST forms refused
//! unread, everything else to s3s (aws-chunked bodies behind the chunk guard); then the
//! status s3s cannot set, a request ID on the response and in every log line, and the
//! request counted.

use std::time::Instant;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use s3s::service::S3Service;
use tracing::Instrument as _;

use super::admin::{Admin, text};
use super::idle::IdleBody;
use crate::chunk_guard::{ChunkGuard, Framing};
use crate::metrics::{Metrics, OperationSlot};

/// What every connection's service holds.
#[derive(Clone)]
pub(super) struct App {
    pub(super) s3: S3Service,
    pub(super) metrics: Metrics,
    pub(super) admin: Admin,
    pub(super) admin_elsewhere: bool,
    /// The virtual-host base domain: a request to `BUCKET.DOMAIN` is never an admin one.
    pub(super) vhost: Option<crate::host::BaseDomain>,
    /// How long a request body may leave the gateway waiting for its next bytes.
    pub(super) idle_timeout: std::time::Duration,
}

/// The request with its body as s3s takes it: an aws-chunked body (detected, as s3s does,
/// by a `STREAMING-` payload hash) behind [`ChunkGuard`], every body behind the idle
/// timeout.
fn body_of(
    req: Request<Incoming>,
    idle_timeout: std::time::Duration,
    metrics: &Metrics,
) -> Request<s3s::Body> {
    let header = |name: &str| req.headers().get(name).map(http::HeaderValue::as_bytes);
    let framing = match header("x-amz-content-sha256") {
        Some(b"STREAMING-UNSIGNED-PAYLOAD-TRAILER") => Some(Framing::Unsigned {
            decoded: header("x-amz-decoded-content-length")
                .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()),
        }),
        Some(v) if v.starts_with(b"STREAMING-") => Some(Framing::Signed),
        _ => None,
    };
    req.map(|b| {
        let body = s3s::Body::http_body(IdleBody::new(b, idle_timeout, metrics.clone()));
        match framing {
            Some(framing) => {
                let guarded: s3s::stream::DynByteStream = Box::pin(ChunkGuard::new(body, framing));
                s3s::Body::from(guarded)
            }
            None => body,
        }
    })
}

/// Whether `req` is a POST form upload (a browser upload signed with a POST policy).
fn is_post_form(req: &Request<Incoming>) -> bool {
    req.method() == http::Method::POST
        && req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .get(..19)
                    .is_some_and(|t| t.eq_ignore_ascii_case("multipart/form-data"))
            })
}

/// An S3 error answered by the router itself, and the connection closed after it (its
/// body, if any, is left unread).
pub(super) fn error_and_close(
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<s3s::Body> {
    let mut r = text(
        status,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
        ),
    );
    let headers = r.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    r
}

/// 501 NotImplemented for a POST form upload, answered without reading its body: s3s
/// parses a form's fields (up to 20 MiB, again from the start after every piece that
/// arrives) before it checks the signature, so a form sent by anyone would hold memory and
/// CPU for as long as its sender trickles it. The connection is closed after the answer.
/// s3s takes every POST of that content type for a form, also a CreateMultipartUpload of an
/// object of that type (it fails with MalformedPOSTRequest), so all of them are refused.
fn post_form_refused() -> Response<s3s::Body> {
    error_and_close(
        StatusCode::NOT_IMPLEMENTED,
        "NotImplemented",
        "POST requests with Content-Type multipart/form-data (form uploads, or a multipart \
         upload of an object of that type) are not supported by kura",
    )
}

/// The subresources whose PUT carries an XML (or JSON) document rather than an object.
const DOCUMENT_SUBRESOURCES: [&str; 22] = [
    "tagging",
    "acl",
    "retention",
    "legal-hold",
    "versioning",
    "lifecycle",
    "cors",
    "policy",
    "object-lock",
    "encryption",
    "notification",
    "replication",
    "website",
    "logging",
    "ownershipControls",
    "publicAccessBlock",
    "accelerate",
    "requestPayment",
    "intelligent-tiering",
    "inventory",
    "metrics",
    "analytics",
];

/// Whether `req` declares a body longer than [`super::XML_MAX_BODY_SIZE`] for a document
/// the gateway reads whole (every POST; a PUT of a subresource, or of a bucket). s3s would
/// refuse it too, but only after reading up to the limit, and with InternalError.
fn document_too_large(req: &Request<Incoming>, virtual_host: bool) -> bool {
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let Some(declared) = declared else {
        return false;
    };
    if usize::try_from(declared).is_ok_and(|n| n <= super::XML_MAX_BODY_SIZE) {
        return false;
    }
    let query = req.uri().query().unwrap_or_default();
    let names = || {
        query
            .split('&')
            .map(|p| p.split('=').next().unwrap_or_default())
    };
    match *req.method() {
        http::Method::POST => true,
        http::Method::PUT => {
            // Path style: `/BUCKET` or `/BUCKET/`; a virtual-host request has its bucket in
            // the host, and a PUT of `/` is the bucket's.
            let path = req.uri().path().trim_start_matches('/');
            let bucket_level = if virtual_host {
                path.is_empty()
            } else {
                !path.trim_end_matches('/').contains('/')
            };
            names().any(|n| DOCUMENT_SUBRESOURCES.contains(&n)) || bucket_level
        }
        _ => false,
    }
}

impl App {
    /// Whether `req`'s host is `BUCKET.DOMAIN` under the virtual-host base domain.
    fn names_bucket(&self, req: &Request<Incoming>) -> bool {
        let Some(domain) = &self.vhost else {
            return false;
        };
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(http::uri::Authority::as_str));
        host.is_some_and(|h| domain.bucket_of(h).is_some())
    }

    pub(super) async fn handle(
        self,
        mut req: Request<Incoming>,
        admin_only: bool,
    ) -> Result<Response<s3s::Body>, s3s::HttpError> {
        let started = Instant::now();
        let operation = OperationSlot::default();
        // s3s hands the request's extensions to the operation, which names itself there.
        req.extensions_mut().insert(operation.clone());
        let request_id = format!("{:016x}", rand_u64());
        let span = tracing::info_span!("request", id = %request_id, method = %req.method(), path = %req.uri().path());
        let expects_continue = req
            .headers()
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let declares_empty_body = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() == b"0");
        async move {
            // With a separate admin listener, the S3 listener leaves these paths to S3 (a
            // bucket may be called `metrics`).
            // Nor on a virtual-host request: `GET /metrics` with `Host: velero.DOMAIN` reads
            // the object `metrics` of bucket `velero`.
            let serve_admin = admin_only || (!self.admin_elsewhere && !self.names_bucket(&req));
            let admin = if serve_admin
                && req.method() == http::Method::GET
                && req.uri().query().is_none()
            {
                self.admin.endpoint(req.uri().path(), admin_only).await
            } else {
                None
            };
            let mut resp = match admin {
                Some((name, r)) => {
                    operation.set(name);
                    r
                }
                None if admin_only => text(StatusCode::NOT_FOUND, "not found\n".into()),
                None if is_post_form(&req) => post_form_refused(),
                None if document_too_large(&req, self.names_bucket(&req)) => error_and_close(
                    StatusCode::BAD_REQUEST,
                    "MaxMessageLengthExceeded",
                    "the request's document is longer than the gateway reads (2 MiB)",
                ),
                None => {
                    self.s3
                        .call(body_of(req, self.idle_timeout, &self.metrics))
                        .await?
                }
            };
            if let Some(crate::s3::Status(status)) = resp.extensions().get() {
                *resp.status_mut() = *status;
            }
            if let Ok(v) = http::HeaderValue::from_str(&request_id) {
                resp.headers_mut().insert("x-amz-request-id", v);
            }
            if expects_continue && (declares_empty_body || !resp.status().is_success()) {
                // hyper sends `100 Continue` only when the body is read, so these requests
                // get their final answer straight away. botocore (aws-cli, boto3) then
                // parses the next response on the same connection as if its status line
                // were already read, loses its headers and waits for a body until its read
                // timeout (60 s). A fresh connection avoids that.
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            let status = resp.status().as_u16();
            let operation = operation.label();
            self.metrics.request(operation, status, started.elapsed());
            tracing::info!(
                operation,
                status,
                elapsed_ms = started.elapsed().as_millis(),
                "served"
            );
            Ok(resp)
        }
        .instrument(span)
        .await
    }
}

fn rand_u64() -> u64 {
    // A request ID needs no cryptographic strength; fall back to the clock.
    kura_keys::rand::u64().unwrap_or_else(|_| {
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                & u128::from(u64::MAX),
        )
        .unwrap_or(0)
    })
}

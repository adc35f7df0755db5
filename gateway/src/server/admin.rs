//! The admin endpoints: `/healthz` (the process answers), `/readyz` (the upstream
//! answers, the answer kept a few seconds) and `/metrics` (Prometheus text).

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Response, StatusCode};

use crate::metrics::Metrics;
use crate::upstream::{Upstream, request};

/// What the admin endpoints read.
#[derive(Clone)]
pub(super) struct Admin {
    metrics: Metrics,
    upstream: Upstream,
    /// The last readiness answer, and when it was had.
    ready: Arc<tokio::sync::Mutex<Option<Readiness>>>,
    /// A bucket the client credentials name, for readiness when the upstream refuses to
    /// list buckets.
    probe_bucket: Option<String>,
}

/// A readiness answer (`Err` holds the upstream's error code) and when it was had.
type Readiness = (Instant, Result<(), String>);

/// How long a readiness answer is kept.
const READY_FOR: Duration = Duration::from_secs(5);

/// A response of `status` with `body` as its text.
pub(super) fn text(status: StatusCode, body: String) -> Response<s3s::Body> {
    let mut r = Response::new(s3s::Body::from(body));
    *r.status_mut() = status;
    r
}

impl Admin {
    /// The endpoints over `metrics` and `upstream`; `probe_bucket` as [`Admin::upstream_ready`]
    /// uses it.
    pub(super) fn new(metrics: Metrics, upstream: Upstream, probe_bucket: Option<String>) -> Self {
        Self {
            metrics,
            upstream,
            ready: Arc::default(),
            probe_bucket,
        }
    }

    /// Ready when the upstream answers a ListBuckets. Bucket-scoped credentials (as
    /// Velero's documented policy) may not list buckets and get AccessDenied; then, when the
    /// client credentials name a bucket, a HeadBucket of it must answer (or find no such
    /// bucket): Garage also says AccessDenied for a key it does not know. With no bucket
    /// named, AccessDenied is ready (AWS and B2 check the key before the policy). The
    /// answer is kept for [`READY_FOR`], so that probes (unauthenticated, when the admin
    /// paths share the S3 port) cannot drive upstream calls, which B2 bills, at their own
    /// rate.
    async fn upstream_ready(&self) -> Result<(), String> {
        // Held across the upstream calls on purpose: concurrent probes wait for one answer.
        let mut last = self.ready.lock().await;
        if let Some((at, answer)) = last.as_ref()
            && at.elapsed() < READY_FOR
        {
            return answer.clone();
        }
        let answer = self
            .upstream
            .s3()
            .list_buckets(request(s3s::dto::ListBucketsInput::default()))
            .await
            .map(|_| ());
        let answer = match (answer, &self.probe_bucket) {
            (Err(e), Some(bucket)) if *e.code() == s3s::S3ErrorCode::AccessDenied => {
                let input = s3s::dto::HeadBucketInput {
                    bucket: bucket.clone(),
                    ..Default::default()
                };
                match self.upstream.s3().head_bucket(request(input)).await {
                    Ok(_) => Ok(()),
                    // A HEAD answer has no body: a 404 is `NotFound`.
                    Err(e) if matches!(e.code().as_str(), "NoSuchBucket" | "NotFound") => Ok(()),
                    Err(e) => Err(format!("{} (HeadBucket {bucket})", e.code().as_str())),
                }
            }
            (Err(e), None) if *e.code() == s3s::S3ErrorCode::AccessDenied => Ok(()),
            (answer, _) => answer.map_err(|e| e.code().as_str().to_string()),
        };
        if let Err(why) = &answer {
            tracing::warn!(%why, "the upstream is not ready");
        }
        self.metrics.upstream_ready(answer.is_ok());
        *last = Some((Instant::now(), answer.clone()));
        answer
    }

    /// The admin endpoint at `path`, if there is one, as (its name as a metrics label, its
    /// response). Only on the admin listener (`admin_listener`) does `/readyz` say why the
    /// upstream is not ready: on the S3 port anyone may ask, and the upstream's error codes
    /// and the bucket probed are not theirs to learn.
    pub(super) async fn endpoint(
        &self,
        path: &str,
        admin_listener: bool,
    ) -> Option<(&'static str, Response<s3s::Body>)> {
        let resp = match path {
            "/healthz" => ("healthz", text(StatusCode::OK, "ok\n".into())),
            "/readyz" => {
                let resp = match self.upstream_ready().await {
                    Ok(()) => text(StatusCode::OK, "ready\n".into()),
                    Err(code) if admin_listener => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("upstream not ready: {code}\n"),
                    ),
                    Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
                };
                ("readyz", resp)
            }
            "/metrics" => {
                let mut r = text(StatusCode::OK, self.metrics.render());
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                ("metrics", r)
            }
            _ => return None,
        };
        Some(resp)
    }
}

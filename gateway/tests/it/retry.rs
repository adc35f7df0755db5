//! Upstream faults: the gateway retries an idempotent upstream call that failed with a 5xx,
//! never sends a streaming upload twice, counts its retries in `/metrics`, and answers an
//! upstream success it cannot read with an error status. s3s-fs never fails on demand, so a
//! forwarding proxy that answers chosen requests with a fault (`MockFaultProxy`, a mock by
//! name) sits between the gateway and the real s3s-fs server; it also shows what a request
//! carried upstream where s3s-fs would ignore it (a delete's If-Match).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use kura_gateway::config::UpstreamConfig;
use kura_keys::Keyring;

use crate::harness::{
    AK, BUCKET, SK, Upstream, client, code, gateway_config, get, pseudo_random, put, raw_http,
    status,
};

/// What the proxy answers instead of forwarding.
#[derive(Clone, Copy)]
enum Fault {
    /// 503 SlowDown, as a loaded S3 service answers.
    SlowDown,
    /// 404 NoSuchKey, as for an object deleted between two requests.
    NoSuchKey,
    /// 403 AccessDenied, as for credentials whose policy does not allow the call (a
    /// bucket-scoped IAM or MinIO policy without `s3:ListAllMyBuckets`).
    AccessDenied,
    /// 403 InvalidAccessKeyId, as for credentials the upstream does not know.
    InvalidAccessKeyId,
    /// 200 with an XML body that is no S3 answer (seen from S3 emulators that name an
    /// answer's root element differently).
    UnreadableOk,
    /// The request is forwarded only after this long, as by an upstream that hangs.
    Delay(Duration),
    /// The upstream's answer is forwarded up to this many body bytes, and then nothing
    /// more is sent, as by an upstream that stops mid-body without closing.
    StallBodyAfter(usize),
    /// The upstream's answer is forwarded up to this many body bytes, and then the
    /// connection is broken off, as by a reset.
    CutBodyAfter(usize),
}

type Rule = (Method, fn(&str) -> bool, usize, Fault);

/// Forwards every request to `target` over HTTP, except that it answers the next `n`
/// requests a rule matches (by method and path with query) with the rule's [`Fault`], after
/// reading their bodies, or delays them. A mock, for faults no real server produces on
/// demand.
struct MockFaultProxy {
    addr: SocketAddr,
    rules: Arc<Mutex<Vec<Rule>>>,
    /// Every request seen: method, path with query, and the status answered.
    seen: Arc<Mutex<Vec<(Method, String, u16)>>>,
    /// The If-Match header of every request seen, by method.
    if_match: Headers,
    /// The header names of every request seen, with its method and path with query.
    header_names: HeaderNames,
}

/// The header names of every request seen, with its method and path with query.
type HeaderNames = Arc<Mutex<Vec<(Method, String, Vec<String>)>>>;

/// A header value of every request seen, by method.
type Headers = Arc<Mutex<Vec<(Method, Option<String>)>>>;

type ProxyBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

impl MockFaultProxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let seen: Arc<Mutex<Vec<(Method, String, u16)>>> = Arc::default();
        let if_match: Headers = Arc::default();
        let header_names: HeaderNames = Arc::default();
        let (r, s, im, hn) = (
            rules.clone(),
            seen.clone(),
            if_match.clone(),
            header_names.clone(),
        );
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (rules, seen, im, hn) = (r.clone(), s.clone(), im.clone(), hn.clone());
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let header = req.headers().get("if-match");
                    let header = header.and_then(|v| v.to_str().ok()).map(str::to_string);
                    im.lock().unwrap().push((req.method().clone(), header));
                    let names = req.headers().keys().map(ToString::to_string).collect();
                    let path = req.uri().path_and_query().map(ToString::to_string);
                    hn.lock().unwrap().push((
                        req.method().clone(),
                        path.unwrap_or_default(),
                        names,
                    ));
                    Self::answer(req, target, rules.clone(), seen.clone())
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service),
                );
            }
        });
        Self {
            addr,
            rules,
            seen,
            if_match,
            header_names,
        }
    }

    /// Answers the next `n` requests with `method` whose path and query satisfy `matches`
    /// with `fault`.
    fn fail_next(&self, method: Method, matches: fn(&str) -> bool, n: usize, fault: Fault) {
        self.rules.lock().unwrap().push((method, matches, n, fault));
    }

    /// How many requests with `method` on a path `matches` accepts were answered with
    /// `status`.
    fn count(&self, method: &Method, matches: fn(&str) -> bool, status: u16) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(m, p, s)| m == method && matches(p) && *s == status)
            .count()
    }

    async fn answer(
        req: Request<Incoming>,
        target: SocketAddr,
        rules: Arc<Mutex<Vec<Rule>>>,
        seen: Arc<Mutex<Vec<(Method, String, u16)>>>,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let method = req.method().clone();
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let fault = {
            let mut rules = rules.lock().unwrap();
            rules
                .iter_mut()
                .find(|(m, matches, n, _)| *m == method && *n > 0 && matches(&path))
                .map(|rule| {
                    rule.2 -= 1;
                    rule.3
                })
        };
        let resp = match fault {
            None => Self::forward(req, target).await,
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Self::forward(req, target).await
            }
            Some(Fault::StallBodyAfter(n)) => {
                let (parts, body) = Self::forward(req, target).await.into_parts();
                Response::from_parts(parts, Self::after(body, n, false).await)
            }
            Some(Fault::CutBodyAfter(n)) => {
                let (parts, body) = Self::forward(req, target).await.into_parts();
                Response::from_parts(parts, Self::after(body, n, true).await)
            }
            Some(
                canned @ (Fault::SlowDown
                | Fault::NoSuchKey
                | Fault::AccessDenied
                | Fault::InvalidAccessKeyId
                | Fault::UnreadableOk),
            ) => {
                let mut body = req.into_body();
                while let Some(frame) = body.frame().await {
                    if frame.is_err() {
                        break;
                    }
                }
                let (status, body): (u16, &'static [u8]) = match canned {
                    Fault::SlowDown => (
                        503,
                        b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                          <Message>Please reduce your request rate.</Message></Error>",
                    ),
                    Fault::NoSuchKey => (
                        404,
                        b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>\
                          <Message>The specified key does not exist.</Message></Error>",
                    ),
                    Fault::AccessDenied => (
                        403,
                        b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>\
                          <Message>Access Denied</Message></Error>",
                    ),
                    Fault::InvalidAccessKeyId => (
                        403,
                        b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InvalidAccessKeyId</Code>\
                          <Message>The AWS Access Key Id you provided does not exist in our records.</Message></Error>",
                    ),
                    _ => (
                        200,
                        b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<NotAnS3Answer/>",
                    ),
                };
                Response::builder()
                    .status(status)
                    .header("content-type", "application/xml")
                    .body(
                        Full::new(Bytes::from_static(body))
                            .map_err(|never| match never {})
                            .boxed(),
                    )
                    .unwrap()
            }
        };
        seen.lock()
            .unwrap()
            .push((method, path, resp.status().as_u16()));
        Ok(resp)
    }

    async fn forward(req: Request<Incoming>, target: SocketAddr) -> Response<ProxyBody> {
        let stream = tokio::net::TcpStream::connect(target).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        sender
            .send_request(req)
            .await
            .unwrap()
            .map(|b| b.map_err(Into::into).boxed())
    }

    /// The first `n` bytes of `body` (whole frames), and then an error (`cut`) or a body
    /// that never goes on.
    async fn after(mut body: ProxyBody, n: usize, cut: bool) -> ProxyBody {
        let mut frames = Vec::new();
        let mut sent = 0;
        while sent < n {
            match body.frame().await {
                Some(Ok(frame)) => {
                    sent += frame.data_ref().map_or(0, Bytes::len);
                    frames.push(Ok(frame));
                }
                _ => break,
            }
        }
        let head = futures::stream::iter(frames);
        if cut {
            // After a pause, so that hyper has flushed what went before: an error at once
            // can discard the answer's buffered head, which the gateway's SDK then retries
            // as a failed call.
            let broken = futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Err("cut off by MockFaultProxy".into())
            });
            BodyExt::boxed(StreamBody::new(head.chain(broken)))
        } else {
            BodyExt::boxed(StreamBody::new(head.chain(futures::stream::pending())))
        }
    }
}

/// The upstream, the fault proxy in front of it, a gateway in front of that, and a client
/// of the gateway.
type ProxiedEnv = (
    crate::harness::Upstream,
    MockFaultProxy,
    kura_gateway::server::Running,
    aws_sdk_s3::Client,
);

/// A gateway whose upstream is s3s-fs behind a [`MockFaultProxy`], and a client of it that
/// does not retry by itself (so that every retry seen is the gateway's).
async fn env() -> ProxiedEnv {
    env_with_timeout(kura_gateway::config::DEFAULT_UPSTREAM_TIMEOUT).await
}

/// [`env`] with `limit` on each attempt of the upstream calls that have one.
async fn env_with_timeout(limit: Duration) -> ProxiedEnv {
    env_over(Upstream::s3s_fs().await, limit).await
}

/// A gateway's config for `upstream` reached through `proxy`, with `limit` on each attempt.
fn proxied_config(
    upstream: &crate::harness::Upstream,
    proxy: &MockFaultProxy,
    limit: Duration,
) -> kura_gateway::config::GatewayConfig {
    let keyring = Arc::new(Keyring::generate("test".into()).unwrap());
    let mut config = gateway_config(upstream, keyring);
    let UpstreamConfig::S3 { url, timeout, .. } = &mut config.upstream else {
        unreachable!("the harness's upstream is S3")
    };
    *url = format!("http://{}", proxy.addr);
    *timeout = limit;
    config
}

/// [`env_with_timeout`] in front of `upstream`.
async fn env_over(upstream: crate::harness::Upstream, limit: Duration) -> ProxiedEnv {
    let proxy = MockFaultProxy::start(upstream.addr).await;
    let config = proxied_config(&upstream, &proxy, limit);
    let gateway = kura_gateway::server::start(config).await.unwrap();
    let conf = client(gateway.addr, AK, SK)
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .build();
    let client = aws_sdk_s3::Client::from_conf(conf);
    client.create_bucket().bucket(BUCKET).send().await.unwrap();
    (upstream, proxy, gateway, client)
}

async fn metrics(gateway: &kura_gateway::server::Running) -> String {
    let (s, _, body) = raw_http("GET", &format!("http://{}/metrics", gateway.addr), b"").await;
    assert_eq!(s, 200);
    String::from_utf8(body).unwrap()
}

/// The sizes a listing of the bucket reports.
async fn listed_sizes(client: &aws_sdk_s3::Client) -> Vec<Option<i64>> {
    let listed = client
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    listed
        .contents()
        .iter()
        .map(aws_sdk_s3::types::Object::size)
        .collect()
}

/// A listing of the bucket that fails with `want_status` and `want_code`; its message.
async fn failed_listing(client: &aws_sdk_s3::Client, want_status: u16, want_code: &str) -> String {
    let err = client
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(want_status), "{err:?}");
    assert_eq!(code(&err).as_deref(), Some(want_code), "{err:?}");
    aws_sdk_s3::error::ProvideErrorMetadata::message(&err)
        .unwrap_or_default()
        .to_string()
}

fn object_path(p: &str) -> bool {
    p.starts_with("/bucket/r")
}

fn is_listing(p: &str) -> bool {
    p.starts_with("/bucket") && p.contains("list-type=2")
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_503_on_get_is_retried_and_counted() {
    let (_upstream, proxy, gateway, client) = env().await;
    let body = pseudo_random(200 * 1024, 31);
    put(&client, "r", &body).await;
    proxy.fail_next(Method::GET, object_path, 2, Fault::SlowDown);
    assert!(
        get(&client, "r").await == body,
        "the retried GET returns the plaintext"
    );
    assert_eq!(proxy.count(&Method::GET, object_path, 503), 2);
    let text = metrics(&gateway).await;
    assert!(
        text.contains("kura_upstream_retries_total{operation=\"GetObject\"} 2"),
        "{text}"
    );

    // A listing (a GET with a query) is retried the same way.
    proxy.fail_next(Method::GET, is_listing, 1, Fault::SlowDown);
    assert_eq!(listed_sizes(&client).await, [Some(200 * 1024)]);
    assert_eq!(proxy.count(&Method::GET, is_listing, 503), 1);
    let text = metrics(&gateway).await;
    assert!(
        text.contains("kura_upstream_retries_total{operation=\"ListObjectsV2\"} 1"),
        "{text}"
    );
}

/// Regression: a listing whose read of an irregular object's header failed after the
/// retries reported the object's stored size, a wrong size that rclone acts on. It now
/// fails with the upstream's error (503 SlowDown when the object vanished between the
/// upstream's listing and the read), and the client's next listing has the right size.
#[tokio::test(flavor = "multi_thread")]
async fn listing_whose_trailer_read_fails_is_an_error_not_a_wrong_size() {
    let (_upstream, proxy, _gateway, client) = env().await;
    let mib = 1024 * 1024;
    // A last part longer than the first makes the layout irregular: its size is in the
    // trailer, which a listing must read.
    crate::multipart::put_in_parts(
        &client,
        "r",
        &[pseudo_random(5 * mib, 33), pseudo_random(5 * mib + 1, 34)],
    )
    .await;

    // Deleted after the upstream listed it, before its header was read: the listing is
    // stale, and the client is asked to list again.
    proxy.fail_next(Method::GET, object_path, 1, Fault::NoSuchKey);
    let message = failed_listing(&client, 503, "SlowDown").await;
    assert!(
        message.contains("changed while it was being listed"),
        "{message}"
    );

    proxy.fail_next(Method::GET, object_path, 4, Fault::SlowDown);
    let message = failed_listing(&client, 503, "SlowDown").await;
    assert_eq!(
        proxy.count(&Method::GET, object_path, 503),
        4,
        "the header read was tried as often as the gateway retries"
    );
    assert!(
        message.contains("reduce your request rate"),
        "the upstream's own error, passed on: {message}"
    );
    assert_eq!(listed_sizes(&client).await, [Some(10 * 1024 * 1024 + 1)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_503_on_streaming_put_is_not_resent() {
    let (_upstream, proxy, gateway, client) = env().await;
    proxy.fail_next(Method::PUT, object_path, 1, Fault::SlowDown);
    let body = pseudo_random(200 * 1024, 32);
    let err = client
        .put_object()
        .bucket(BUCKET)
        .key("r")
        .body(body.clone().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(503));
    assert_eq!(code(&err).as_deref(), Some("SlowDown"));
    assert_eq!(
        proxy.count(&Method::PUT, object_path, 503) + proxy.count(&Method::PUT, object_path, 200),
        1,
        "the upload body streams through once and cannot be sent again"
    );
    let text = metrics(&gateway).await;
    assert!(
        !text.contains("kura_upstream_retries_total{operation=\"PutObject\"}"),
        "{text}"
    );
    let err = client
        .head_object()
        .bucket(BUCKET)
        .key("r")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(404), "nothing is stored");

    // The client's own retry goes through.
    put(&client, "r", &body).await;
    assert!(get(&client, "r").await == body);
}

#[tokio::test(flavor = "multi_thread")]
async fn unreadable_upstream_success_is_not_a_success() {
    let (_upstream, proxy, gateway, client) = env().await;
    proxy.fail_next(
        Method::GET,
        |p| p.starts_with("/bucket") && p.contains("versioning"),
        10,
        Fault::UnreadableOk,
    );
    let err = client
        .get_bucket_versioning()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(500), "{err:?}");
    assert_eq!(code(&err).as_deref(), Some("InternalError"));
    let text = metrics(&gateway).await;
    assert!(
        text.contains(
            "kura_upstream_errors_total{operation=\"GetBucketVersioning\",code=\"InternalError\"} 1"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hung_upstream_answer_is_cut_and_retried() {
    let (_upstream, proxy, gateway, client) = env_with_timeout(Duration::from_secs(1)).await;
    let body = pseudo_random(100 * 1024, 33);
    put(&client, "r", &body).await;

    // A listing, a HEAD and a GET whose first attempt hangs for longer than the limit.
    for (method, matches) in [
        (Method::GET, is_listing as fn(&str) -> bool),
        (Method::HEAD, object_path),
        (Method::GET, object_path),
    ] {
        proxy.fail_next(method, matches, 1, Fault::Delay(Duration::from_secs(30)));
    }
    let t = Instant::now();
    assert_eq!(listed_sizes(&client).await, [Some(100 * 1024)]);
    let head = client
        .head_object()
        .bucket(BUCKET)
        .key("r")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(100 * 1024));
    assert!(get(&client, "r").await == body);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "three retried calls took {:?}, as if the hung attempts were waited out",
        t.elapsed()
    );
    let text = metrics(&gateway).await;
    for op in ["ListObjectsV2", "HeadObject", "GetObject"] {
        assert!(
            text.contains(&format!(
                "kura_upstream_retries_total{{operation=\"{op}\"}} 1"
            )),
            "{op}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_that_never_answers_is_an_error_not_a_hang() {
    let (_upstream, proxy, _gateway, client) = env_with_timeout(Duration::from_secs(1)).await;
    proxy.fail_next(
        Method::GET,
        is_listing,
        10,
        Fault::Delay(Duration::from_mins(1)),
    );
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        client.list_objects_v2().bucket(BUCKET).send(),
    )
    .await
    .expect("the gateway answers once its attempts are spent")
    .unwrap_err();
    assert_eq!(status(&err), Some(500), "{err:?}");
    assert_eq!(code(&err).as_deref(), Some("InternalError"));
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_upstream_upload_is_not_cut() {
    // Uploads run as long as their bodies take: an upstream that answers a PUT and a part
    // later than the limit on other calls still stores them, each sent once.
    let (_upstream, proxy, gateway, client) = env_with_timeout(Duration::from_secs(1)).await;
    let slow = Fault::Delay(Duration::from_secs(3));
    proxy.fail_next(Method::PUT, object_path, 2, slow);
    let body = pseudo_random(300 * 1024, 34);
    put(&client, "r", &body).await;
    assert!(get(&client, "r").await == body);

    crate::multipart::put_in_parts(&client, "r-parts", std::slice::from_ref(&body)).await;
    assert!(get(&client, "r-parts").await == body);
    assert_eq!(proxy.count(&Method::PUT, object_path, 200), 2);
    let text = metrics(&gateway).await;
    assert!(!text.contains("kura_upstream_retries_total{"), "{text}");
}

/// Reads `key` whole (or `range`) with a client that waits as long as the gateway lets it
/// (aws-sdk's own stall check off), within 30 s: the bytes, or the error.
async fn patient_read(
    client: &aws_sdk_s3::Client,
    key: &str,
    range: Option<&str>,
) -> Result<Vec<u8>, String> {
    let patient =
        aws_sdk_s3::Client::from_conf(
            client
                .config()
                .to_builder()
                .stalled_stream_protection(
                    aws_sdk_s3::config::StalledStreamProtectionConfig::disabled(),
                )
                .build(),
        );
    tokio::time::timeout(Duration::from_secs(30), async {
        let out = patient
            .get_object()
            .bucket(BUCKET)
            .key(key)
            .set_range(range.map(str::to_string))
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        out.body
            .collect()
            .await
            .map(|b| b.into_bytes().to_vec())
            .map_err(|e| format!("{e:?}"))
    })
    .await
    .expect("the gateway answers or cuts the body instead of waiting")
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_body_that_breaks_off_is_picked_up_where_it_broke() {
    let (_upstream, proxy, gateway, client) = env().await;
    let body = pseudo_random(3 * 1024 * 1024, 36);
    put(&client, "r", &body).await;

    // A whole read: the first answer breaks after 1 MiB, the rest comes as a range.
    proxy.fail_next(
        Method::GET,
        object_path,
        1,
        Fault::CutBodyAfter(1024 * 1024),
    );
    assert!(patient_read(&client, "r", None).await.unwrap() == body);
    assert_eq!(proxy.count(&Method::GET, object_path, 200), 1);
    assert_eq!(proxy.count(&Method::GET, object_path, 206), 1);

    // A range read whose answer breaks twice. (A first range read fetches the header
    // with a GET of its own, and caches it.)
    let range = Some("bytes=100000-2999999");
    assert!(patient_read(&client, "r", range).await.unwrap() == body[100_000..3_000_000]);
    let before = proxy.count(&Method::GET, object_path, 206);
    proxy.fail_next(Method::GET, object_path, 2, Fault::CutBodyAfter(300 * 1024));
    assert!(patient_read(&client, "r", range).await.unwrap() == body[100_000..3_000_000]);
    assert_eq!(proxy.count(&Method::GET, object_path, 206) - before, 3);
    let text = metrics(&gateway).await;
    assert!(
        text.contains("kura_upstream_retries_total{operation=\"GetObject\"} 3"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_body_that_keeps_breaking_ends_in_an_error() {
    let (_upstream, proxy, _gateway, client) = env().await;
    let body = pseudo_random(3 * 1024 * 1024, 37);
    put(&client, "r", &body).await;
    proxy.fail_next(Method::GET, object_path, 4, Fault::CutBodyAfter(256 * 1024));
    let read = patient_read(&client, "r", None).await;
    assert!(
        read.is_err(),
        "a body that broke off must not read as whole"
    );
    assert_eq!(
        proxy.count(&Method::GET, object_path, 206),
        3,
        "three resumes"
    );
    assert!(
        get(&client, "r").await == body,
        "the client's retry reads it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_body_that_stalls_is_cut_not_hung() {
    let (_upstream, proxy, gateway, client) = env_with_timeout(Duration::from_secs(1)).await;
    let body = pseudo_random(3 * 1024 * 1024, 35);
    put(&client, "r", &body).await;
    // The first answer stalls after 256 KiB and so does every resumed one.
    proxy.fail_next(
        Method::GET,
        object_path,
        4,
        Fault::StallBodyAfter(256 * 1024),
    );
    let read = patient_read(&client, "r", None).await;
    assert!(read.is_err(), "a stalled body must not read as whole");
    let text = metrics(&gateway).await;
    assert!(
        text.contains("kura_upstream_errors_total{operation=\"GetObject\",code=\"BodyStalled\"} 4"),
        "{text}"
    );
    // One stall, and the resumed read completes the body.
    proxy.fail_next(
        Method::GET,
        object_path,
        1,
        Fault::StallBodyAfter(256 * 1024),
    );
    assert!(patient_read(&client, "r", None).await.unwrap() == body);
}

/// Regression: a DeleteObject's If-Match went upstream in client terms (the `-0` ETag), so
/// on a service that checks it the delete was always refused. (s3s-fs ignores the header,
/// hence the look at what the proxy saw.)
#[tokio::test(flavor = "multi_thread")]
async fn a_conditional_delete_names_the_upstream_etag() {
    let (_upstream, proxy, _gateway, client) = env().await;
    let out = client
        .put_object()
        .bucket(BUCKET)
        .key("r")
        .body(pseudo_random(1000, 38).into())
        .send()
        .await
        .unwrap();
    let client_etag = out.e_tag().unwrap().to_string();
    assert!(client_etag.ends_with("-0\""), "{client_etag}");
    client
        .delete_object()
        .bucket(BUCKET)
        .key("r")
        .if_match(&client_etag)
        .send()
        .await
        .unwrap();
    let sent: Vec<Option<String>> = proxy
        .if_match
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| *m == Method::DELETE)
        .map(|(_, h)| h.clone())
        .collect();
    assert_eq!(sent, [Some(client_etag.replace("-0\"", "\""))]);
}

/// Regression (found by `conformance/run --upstream b2-shaped`): aws-sdk-s3 added a CRC32
/// (`x-amz-checksum-crc32`, `x-amz-sdk-checksum-algorithm`) to the gateway's upstream
/// DeleteObjects even with checksums "when required", and Backblaze B2 refuses every such
/// header, so batch deletes through kura failed on B2. The call carries Content-MD5 instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_delete_goes_upstream_with_content_md5_and_no_checksum_header() {
    use aws_sdk_s3::types::{Delete, ObjectIdentifier};
    let (_upstream, proxy, _gateway, client) = env().await;
    put(&client, "batch-1", b"one").await;
    let delete = Delete::builder()
        .objects(ObjectIdentifier::builder().key("batch-1").build().unwrap())
        .build()
        .unwrap();
    client
        .delete_objects()
        .bucket(BUCKET)
        .delete(delete)
        .send()
        .await
        .unwrap();
    let seen = proxy.header_names.lock().unwrap().clone();
    let (_, _, names) = seen
        .iter()
        .find(|(m, p, _)| *m == Method::POST && p.contains("delete"))
        .expect("the batch delete went upstream");
    assert!(names.iter().any(|n| n == "content-md5"), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("x-amz-checksum-") || n == "x-amz-sdk-checksum-algorithm"),
        "{names:?}"
    );
}

fn is_completion(p: &str) -> bool {
    p.starts_with("/bucket/r") && p.contains("uploadId=")
}

/// Regression: the gateway answered a completion only when the upstream's had arrived, so a
/// completion that took the upstream long (S3 documents minutes for large objects; the
/// embedded store copies every part) left the client without a byte until its read
/// timeout. Past a few seconds the client now gets its 200 and keep-alive whitespace, and
/// the final answer at the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_upstream_completion_keeps_the_client_waiting() {
    let (_upstream, proxy, _gateway, client) = env().await;
    let body = pseudo_random(300 * 1024, 35);
    let id = crate::multipart::create(&client, "r").await;
    let part = crate::multipart::upload(&client, "r", &id, 1, body.clone()).await;
    proxy.fail_next(
        Method::POST,
        is_completion,
        1,
        Fault::Delay(Duration::from_secs(20)),
    );
    // A client that gives up when no byte arrives for 15 s.
    let impatient = with_timeouts(
        &client,
        TimeoutConfig::builder().read_timeout(Duration::from_secs(15)),
    );
    let out = impatient
        .complete_multipart_upload()
        .bucket(BUCKET)
        .key("r")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(part)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(out.e_tag().is_some());
    assert!(get(&client, "r").await == body);
}

/// `client` with the time limits `timeouts`.
fn with_timeouts(
    client: &aws_sdk_s3::Client,
    timeouts: aws_sdk_s3::config::timeout::TimeoutConfigBuilder,
) -> aws_sdk_s3::Client {
    let conf = client.config().to_builder();
    aws_sdk_s3::Client::from_conf(conf.timeout_config(timeouts.build()).build())
}

fn is_second_part_of_copy(p: &str) -> bool {
    p.starts_with("/bucket/copy?") && p.contains("partNumber=2")
}

/// The uploads the upstream (s3s-fs) holds open: one `.upload_id-<id>` file each, and one
/// per part stored.
fn open_upload_files(upstream: &crate::harness::Upstream) -> usize {
    std::fs::read_dir(upstream.dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".upload_id-")
        })
        .count()
}

/// Regression: a large CopyObject runs as an upload of the gateway's own, which it aborted
/// only when the copy failed; a client that gave up meanwhile (aws-cli's read timeout is
/// 60 s, and the pieces are copied without keep-alive bytes) left it open upstream, with
/// every part copied so far.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_the_client_gives_up_on_leaves_no_upload_open() {
    let (upstream, proxy, _gateway, client) = env().await;
    // Above the 8 MiB the gateway re-seals itself: the rest is copied server-side.
    put(&client, "source", &pseudo_random(9 << 20, 36)).await;
    proxy.fail_next(
        Method::PUT,
        is_second_part_of_copy,
        1,
        Fault::Delay(Duration::from_secs(30)),
    );
    let impatient = with_timeouts(
        &client,
        TimeoutConfig::builder().operation_timeout(Duration::from_secs(2)),
    );
    let copy = impatient
        .copy_object()
        .bucket(BUCKET)
        .key("copy")
        .copy_source(format!("{BUCKET}/source"))
        .send()
        .await;
    assert!(copy.is_err(), "the client gave up");
    assert!(
        open_upload_files(&upstream) > 0,
        "the copy's upload was open when the client left"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_upload_files(&upstream) > 0 {
        assert!(
            Instant::now() < deadline,
            "the gateway left its upload open upstream"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let head = client.head_object().bucket(BUCKET).key("copy").send().await;
    assert_eq!(status(&head.unwrap_err()), Some(404), "no copy was made");
}

fn is_irr(p: &str) -> bool {
    p == "/bucket/irr" || p.starts_with("/bucket/irr?")
}

/// Regression: the read of an object's header (and so its size) was not pinned to the ETag
/// the gateway had just seen, so an object replaced in between answered a HEAD with the old
/// object's ETag and the new one's size. The upstream here is the embedded store, which
/// holds reads to their If-Match (s3s-fs ignores it). The pinned read fails, and the HEAD
/// asks the upstream again (it answered 503 SlowDown until HEADs read every object's
/// header): its answer is the successor's, whole.
#[tokio::test(flavor = "multi_thread")]
async fn an_object_replaced_while_its_size_is_read_is_not_mixed_with_its_successor() {
    let limit = kura_gateway::config::DEFAULT_UPSTREAM_TIMEOUT;
    let (_upstream, proxy, _gateway, client) =
        env_over(crate::harness::Upstream::local_dir().await, limit).await;
    // Irregular parts: the size is in the trailer, read with the header on a HEAD.
    let parts = [pseudo_random(5_300_000, 37), pseudo_random(100, 38)];
    let old = crate::multipart::put_in_parts(&client, "irr", &parts).await;
    // The completion left nothing in the gateway's cache, so the HEAD reads the header
    // upstream; that read is held back while another writer replaces the object.
    let other = client.clone();
    proxy.fail_next(Method::GET, is_irr, 1, Fault::Delay(Duration::from_secs(2)));
    let head =
        tokio::spawn(async move { other.head_object().bucket(BUCKET).key("irr").send().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let new = put(&client, "irr", b"the successor").await;
    let raced = head.await.unwrap().unwrap();
    assert_eq!(raced.e_tag(), new.e_tag());
    assert_eq!(raced.content_length(), Some(13));
    let head = client
        .head_object()
        .bucket(BUCKET)
        .key("irr")
        .send()
        .await
        .unwrap();
    assert_eq!(head.e_tag(), new.e_tag());
    assert_ne!(head.e_tag(), Some(old.as_str()));
    assert_eq!(head.content_length(), Some(13));
}

fn is_list_buckets(p: &str) -> bool {
    p == "/" || p.starts_with("/?")
}

/// `/readyz` asks the upstream (ListBuckets) at most once per 5 s: probes need no
/// credentials, and B2 bills the calls.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_probes_are_answered_from_a_recent_answer() {
    let (_upstream, proxy, gateway, _client) = env().await;
    let url = format!("http://{}/readyz", gateway.addr);
    for _ in 0..3 {
        let (s, _, _) = raw_http("GET", &url, b"").await;
        assert_eq!(s, 200);
    }
    assert_eq!(proxy.count(&Method::GET, is_list_buckets, 200), 1);
}

/// Regression: `/readyz` stayed 503 for ever with upstream credentials that may not list
/// buckets (Velero's documented bucket-scoped policy), though every object call worked.
/// Then a bucket the client credentials name (the harness's `limited`, which the upstream
/// does not have) must be reachable: ready. Credentials the upstream does not know are
/// not, whether it says InvalidAccessKeyId (AWS) or AccessDenied (Garage) for them.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_needs_valid_credentials_not_the_right_to_list_buckets() {
    let (_upstream, proxy, gateway, _client) = env().await;
    let url = format!("http://{}/readyz", gateway.addr);
    proxy.fail_next(Method::GET, is_list_buckets, 1, Fault::AccessDenied);
    let (s, _, body) = raw_http("GET", &url, b"").await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&body));
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.fail_next(Method::GET, is_list_buckets, 1, Fault::AccessDenied);
    proxy.fail_next(
        Method::HEAD,
        |p| p.starts_with("/limited"),
        1,
        Fault::AccessDenied,
    );
    let (s, _, body) = raw_http("GET", &url, b"").await;
    assert_eq!(s, 503, "{}", String::from_utf8_lossy(&body));
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.fail_next(Method::GET, is_list_buckets, 1, Fault::InvalidAccessKeyId);
    let (s, _, _) = raw_http("GET", &url, b"").await;
    assert_eq!(s, 503);
}

/// Anyone who reaches the S3 port may ask `/readyz` without credentials: it learns only
/// ready or not. Why not (the upstream's error code, the bucket probed) is for the admin
/// listener, which the operator keeps to probes and the scraper.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_on_the_s3_port_says_only_not_ready_and_the_admin_listener_says_why() {
    let (upstream, proxy, gateway, _client) = env().await;
    proxy.fail_next(Method::GET, is_list_buckets, 1, Fault::InvalidAccessKeyId);
    let (s, _, body) = raw_http("GET", &format!("http://{}/readyz", gateway.addr), b"").await;
    assert_eq!(s, 503);
    assert_eq!(String::from_utf8_lossy(&body), "not ready\n");

    let mut config = proxied_config(
        &upstream,
        &proxy,
        kura_gateway::config::DEFAULT_UPSTREAM_TIMEOUT,
    );
    config.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    let with_admin = kura_gateway::server::start(config).await.unwrap();
    proxy.fail_next(Method::GET, is_list_buckets, 1, Fault::InvalidAccessKeyId);
    let admin = with_admin.admin_addr.unwrap();
    let (s, _, body) = raw_http("GET", &format!("http://{admin}/readyz"), b"").await;
    assert_eq!(s, 503);
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("InvalidAccessKeyId"), "{body}");
}

//! Upstream faults: the gateway retries an idempotent upstream call that failed with a 5xx,
//! never sends a streaming upload twice, counts its retries in `/metrics`, and answers an
//! upstream success it cannot read with an error status. s3s-fs never fails on demand, so a
//! forwarding proxy that answers chosen requests with a fault (`MockFaultProxy`, a mock by
//! name) sits between the gateway and the real s3s-fs server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::retry::RetryConfig;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Either, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use kura_gateway::config::UpstreamConfig;
use kura_keys::Keyring;

use crate::harness::{
    AK, BUCKET, SK, client, code, data, gateway_config, get, put, raw_http, start_upstream, status,
};

/// What the proxy answers instead of forwarding.
#[derive(Clone, Copy)]
enum Fault {
    /// 503 SlowDown, as a loaded S3 service answers.
    SlowDown,
    /// 200 with an XML body that is no S3 answer (seen from S3 emulators that name an
    /// answer's root element differently).
    UnreadableOk,
}

type Rule = (Method, fn(&str) -> bool, usize, Fault);

/// Forwards every request to `target` over HTTP, except that it answers the next `n`
/// requests a rule matches (by method and path with query) with the rule's [`Fault`], after
/// reading their bodies. A mock, for faults no real server produces on demand.
struct MockFaultProxy {
    addr: SocketAddr,
    rules: Arc<Mutex<Vec<Rule>>>,
    /// Every request seen: method, path with query, and the status answered.
    seen: Arc<Mutex<Vec<(Method, String, u16)>>>,
}

type ProxyBody = Either<Incoming, Full<Bytes>>;

impl MockFaultProxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let seen: Arc<Mutex<Vec<(Method, String, u16)>>> = Arc::default();
        let (r, s) = (rules.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (rules, seen) = (r.clone(), s.clone());
                let service = hyper::service::service_fn(move |req| {
                    Self::answer(req, target, rules.clone(), seen.clone())
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service),
                );
            }
        });
        Self { addr, rules, seen }
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
        let resp = if let Some(fault) = fault {
            let mut body = req.into_body();
            while let Some(frame) = body.frame().await {
                if frame.is_err() {
                    break;
                }
            }
            let (status, body): (u16, &'static [u8]) = match fault {
                Fault::SlowDown => (
                    503,
                    b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                      <Message>Please reduce your request rate.</Message></Error>",
                ),
                Fault::UnreadableOk => (
                    200,
                    b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<NotAnS3Answer/>",
                ),
            };
            Response::builder()
                .status(status)
                .header("content-type", "application/xml")
                .body(Either::Right(Full::new(Bytes::from_static(body))))
                .unwrap()
        } else {
            let stream = tokio::net::TcpStream::connect(target).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(conn);
            sender.send_request(req).await.unwrap().map(Either::Left)
        };
        seen.lock()
            .unwrap()
            .push((method, path, resp.status().as_u16()));
        Ok(resp)
    }
}

/// A gateway whose upstream is s3s-fs behind a [`MockFaultProxy`], and a client of it that
/// does not retry by itself (so that every retry seen is the gateway's).
async fn env() -> (
    crate::harness::Upstream,
    MockFaultProxy,
    kura_gateway::server::Running,
    aws_sdk_s3::Client,
) {
    let upstream = start_upstream().await;
    let proxy = MockFaultProxy::start(upstream.addr).await;
    let keyring = Arc::new(Keyring::generate("test".into()).unwrap());
    let mut config = gateway_config(&upstream, keyring);
    let UpstreamConfig::S3 { url, .. } = &mut config.upstream else {
        unreachable!("the harness's upstream is S3")
    };
    *url = format!("http://{}", proxy.addr);
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

fn object_path(p: &str) -> bool {
    p.starts_with("/bucket/r")
}

fn is_listing(p: &str) -> bool {
    p.starts_with("/bucket") && p.contains("list-type=2")
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_503_on_get_is_retried_and_counted() {
    let (_upstream, proxy, gateway, client) = env().await;
    let body = data(200 * 1024, 31);
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
    let listed = client
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.contents().len(), 1);
    assert_eq!(listed.contents()[0].size(), Some(200 * 1024));
    assert_eq!(proxy.count(&Method::GET, is_listing, 503), 1);
    let text = metrics(&gateway).await;
    assert!(
        text.contains("kura_upstream_retries_total{operation=\"ListObjectsV2\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_503_on_streaming_put_is_not_resent() {
    let (_upstream, proxy, gateway, client) = env().await;
    proxy.fail_next(Method::PUT, object_path, 1, Fault::SlowDown);
    let body = data(200 * 1024, 32);
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

//! The gateway tests' environment: an upstream S3 server and a gateway in front of it (both
//! from `kura-testkit`), aws-sdk-s3 clients for both, and hand-made SigV4 and raw HTTP for
//! the requests an SDK will not send.

#![allow(dead_code, reason = "each topic uses a different part of the harness")]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use kura_gateway::config::{BucketScope, GatewayConfig};
use kura_gateway::server::Running;
use kura_keys::Keyring;

pub use kura_testkit::data::pseudo_random;
pub use kura_testkit::upstream::{UP_AK, UP_SK, Upstream};
pub use kura_testkit::walk::files_under;

pub const AK: &str = "client-ak";
pub const SK: &str = "client-secret-key";
pub const LIMITED_AK: &str = "limited-ak";
pub const LIMITED_SK: &str = "limited-secret-key";
pub const BUCKET: &str = "bucket";

pub struct Env {
    pub upstream: Upstream,
    pub keyring: Arc<Keyring>,
    pub gateway: Running,
    pub client: Client,
}

/// The test gateway in front of `upstream`: [`AK`] may use every bucket, [`LIMITED_AK`] only
/// `limited`.
pub fn gateway_config(upstream: &Upstream, keyring: Arc<Keyring>) -> GatewayConfig {
    let mut limited = kura_testkit::gateway::credential(LIMITED_AK, LIMITED_SK);
    limited.buckets = BucketScope::Only(vec!["limited".into()]);
    // A redirect is kept by copies (`copy.rs`): the full client may set one.
    let mut full = kura_testkit::gateway::credential(AK, SK);
    full.powers = kura_gateway::powers::Powers::parse(&["website-redirect"]).unwrap();
    kura_testkit::gateway::loopback_config(upstream, keyring, vec![full, limited])
}

pub fn client(addr: SocketAddr, ak: &str, sk: &str) -> Client {
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(format!("http://{addr}"))
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(ak, sk, None, None, "test"))
        .build();
    Client::from_conf(conf)
}

impl Env {
    pub async fn start() -> Env {
        let upstream = Upstream::s3s_fs().await;
        let keyring = kura_testkit::gateway::keyring();
        let gateway = kura_gateway::server::start(gateway_config(&upstream, keyring.clone()))
            .await
            .unwrap();
        let client = client(gateway.addr, AK, SK);
        client.create_bucket().bucket(BUCKET).send().await.unwrap();
        Env {
            upstream,
            keyring,
            gateway,
            client,
        }
    }

    /// Where the upstream stores an object.
    pub fn stored_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.upstream.stored_path(bucket, key)
    }

    /// The upstream, reached directly with its own credential (as someone who can write
    /// the bucket would).
    pub fn bucket_writer(&self) -> Client {
        client(self.upstream.addr, UP_AK, UP_SK)
    }

    pub async fn put(
        &self,
        key: &str,
        data: &[u8],
    ) -> aws_sdk_s3::operation::put_object::PutObjectOutput {
        put(&self.client, key, data).await
    }

    /// Asserts that HEAD of `key` is 404: the object is not there.
    pub async fn assert_absent(&self, key: &str, why: &str) {
        let err = self
            .client
            .head_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .unwrap_err();
        assert_eq!(status(&err), Some(404), "{key}: {why}");
    }

    /// A second gateway on the same upstream and key file, and a client of it: another
    /// replica, sharing nothing with the first but what it stores.
    pub async fn replica(&self) -> (Running, Client) {
        let other =
            kura_gateway::server::start(gateway_config(&self.upstream, self.keyring.clone()))
                .await
                .unwrap();
        let c = client(other.addr, AK, SK);
        (other, c)
    }

    /// ListObjectsV2 of the test bucket, first page; panics on failure.
    pub async fn list(&self) -> aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output {
        self.client
            .list_objects_v2()
            .bucket(BUCKET)
            .send()
            .await
            .unwrap()
    }

    /// HEAD of `key`; panics on failure.
    pub async fn head(&self, key: &str) -> aws_sdk_s3::operation::head_object::HeadObjectOutput {
        self.client
            .head_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .unwrap()
    }

    pub async fn get(&self, key: &str) -> Vec<u8> {
        get(&self.client, key).await
    }

    pub async fn get_range(&self, key: &str, range: &str) -> Result<Vec<u8>, String> {
        match self
            .client
            .get_object()
            .bucket(BUCKET)
            .key(key)
            .range(range)
            .send()
            .await
        {
            Ok(out) => out
                .body
                .collect()
                .await
                .map(|b| b.into_bytes().to_vec())
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("{}", aws_sdk_s3::error::DisplayErrorContext(e))),
        }
    }
}

/// PUTs `data` as `key` in [`BUCKET`]; panics on failure.
pub async fn put(
    client: &Client,
    key: &str,
    data: &[u8],
) -> aws_sdk_s3::operation::put_object::PutObjectOutput {
    client
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(data.to_vec().into())
        .send()
        .await
        .unwrap()
}

/// GETs the whole of `key` in [`BUCKET`]; panics on failure.
pub async fn get(client: &Client, key: &str) -> Vec<u8> {
    let out = client
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
    out.body.collect().await.unwrap().into_bytes().to_vec()
}

/// The HTTP status of a failed SDK call.
pub fn status<E>(
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

/// The S3 error code of a failed SDK call.
pub fn code<E: aws_sdk_s3::error::ProvideErrorMetadata, R>(
    e: &aws_sdk_s3::error::SdkError<E, R>,
) -> Option<String> {
    e.as_service_error()
        .and_then(|s| s.code())
        .map(str::to_string)
}

/// A plain HTTP/1.1 request over a socket, for presigned URLs: (status, headers, body).
pub async fn raw_http(method: &str, url: &str, body: &[u8]) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (host, path) = url
        .strip_prefix("http://")
        .unwrap()
        .split_once('/')
        .unwrap();
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let request_head = format!(
        "{method} /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(request_head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).await.unwrap();
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = resp[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, head, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
    out
}

/// SHA-256 as lower-case hex.
pub fn hex_sha256(b: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, b))
}

/// The SigV4 signature of a canonical request, with the signing key, date stamp and scope
/// of [`sigv4_now`].
pub fn sigv4_signature(k: &[u8], stamp: &str, scope: &str, canonical: &str) -> String {
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex_sha256(canonical.as_bytes())
    );
    hex::encode(hmac_sha256(k, to_sign.as_bytes()))
}

/// HMAC-SHA-256.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), msg)
        .as_ref()
        .to_vec()
}

/// Writes `raw` (a whole HTTP/1.1 request that ends the connection) to `addr` and returns
/// the response as text.
pub async fn send_raw(addr: SocketAddr, raw: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).to_string()
}

/// For hand-signed SigV4 requests with the client secret: (x-amz-date value, credential
/// scope, signing key), for now and region us-east-1.
pub fn sigv4_now() -> (String, String, Vec<u8>) {
    let now = time::OffsetDateTime::now_utc();
    let date = format!(
        "{:04}{:02}{:02}",
        now.year(),
        u8::from(now.month()),
        now.day()
    );
    let stamp = format!(
        "{date}T{:02}{:02}{:02}Z",
        now.hour(),
        now.minute(),
        now.second()
    );
    let scope = format!("{date}/us-east-1/s3/aws4_request");
    let mut k = hmac_sha256(format!("AWS4{SK}").as_bytes(), date.as_bytes());
    for part in ["us-east-1", "s3", "aws4_request"] {
        k = hmac_sha256(&k, part.as_bytes());
    }
    (stamp, scope, k)
}

/// Asserts that the gateway closes `socket`, on which the test sends nothing, without an
/// answer: not before `limit` (less a second of slack), and within 10 s after it.
pub async fn closed_after(mut socket: tokio::net::TcpStream, limit: std::time::Duration) {
    use tokio::io::AsyncReadExt as _;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(
        limit + std::time::Duration::from_secs(10),
        socket.read(&mut buf),
    )
    .await
    .expect("the gateway closes the connection")
    .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(started.elapsed() + std::time::Duration::from_secs(1) >= limit);
}

//! The server around the S3 service: HTTPS with tokio-rustls, the admin listener, and a
//! graceful shutdown that lets in-flight requests finish.

use std::sync::Arc;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore, rustls_provider::CryptoMode};
use kura_gateway::config::TlsFiles;

use crate::harness::{AK, BUCKET, Env, SK, Upstream, gateway_config, pseudo_random, raw_http};

/// A test CA and a certificate for 127.0.0.1 signed by it: (CA, certificate, key).
pub fn certificates(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let p = |n: &str| dir.join(n);
    let openssl = |args: &[&str]| {
        let ok = std::process::Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl is needed to make test certificates")
            .success();
        assert!(ok, "openssl {args:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=kura test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
    ]);
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "req.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        "-out",
        "cert.pem",
    ]);
    (p("ca.pem"), p("cert.pem"), p("key.pem"))
}

/// An S3 client of the gateway's HTTPS port that trusts only the CA in `ca` (PEM).
pub fn https_client(port: u16, ca: &std::path::Path) -> aws_sdk_s3::Client {
    let tls = TlsContext::builder()
        .with_trust_store(TrustStore::empty().with_pem_certificate(std::fs::read(ca).unwrap()))
        .build()
        .unwrap();
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(tls)
        .build_https();
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(format!("https://127.0.0.1:{port}"))
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(AK, SK, None, None, "test"))
        .http_client(http)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_https_with_the_configured_certificate() {
    let upstream = Upstream::s3s_fs().await;
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(certs.path());
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    let mut config = gateway_config(&upstream, keyring);
    config.tls = Some(TlsFiles {
        cert: cert.clone(),
        key,
    });
    let gw = kura_gateway::server::start(config).await.unwrap();
    let client = https_client(gw.addr.port(), &ca);
    client.create_bucket().bucket(BUCKET).send().await.unwrap();
    let body = pseudo_random(200_000, 1);
    client
        .put_object()
        .bucket(BUCKET)
        .key("tls")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    let got = client
        .get_object()
        .bucket(BUCKET)
        .key("tls")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().to_vec(),
        body
    );
    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut sock = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(&mut sock, &mut answer),
    )
    .await;
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "plain HTTP must not be served on the TLS port"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_listener_serves_only_admin_endpoints() {
    let upstream = Upstream::s3s_fs().await;
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    let mut config = gateway_config(&upstream, keyring);
    config.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    let gw = kura_gateway::server::start(config).await.unwrap();
    let admin = gw.admin_addr.unwrap();
    let (s, _, _) = raw_http("GET", &format!("http://{admin}/metrics"), b"").await;
    assert_eq!(s, 200);
    let (s, _, _) = raw_http("GET", &format!("http://{admin}/bucket/key"), b"").await;
    assert_eq!(s, 404, "the admin listener does not serve S3");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_drains_a_download_in_flight() {
    let env = Env::start().await;
    let body = pseudo_random(48 << 20, 3);
    env.put("big", &body).await;
    let addr = env.gateway.addr;
    let out = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("big")
        .send()
        .await
        .unwrap();
    let Env {
        gateway, client, ..
    } = env;
    let stopping = tokio::spawn(gateway.shutdown());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let got = out
        .body
        .collect()
        .await
        .expect("an in-flight download completes during shutdown")
        .into_bytes();
    assert!(got == body, "drained download differs");
    stopping.await.unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no new connections after shutdown"
    );
    drop(client);
}

/// An upstream reached over HTTPS whose certificate only the configured CA bundle vouches
/// for: the gateway must trust it through `ca_bundle`, and refuse it without.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_over_tls_with_a_custom_ca_bundle() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio_rustls::rustls;

    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(certs.path());
    let store = tempfile::tempdir().unwrap();
    let mut b = s3s::service::S3ServiceBuilder::new(s3s_fs::FileSystem::new(store.path()).unwrap());
    b.set_auth(s3s::auth::SimpleAuth::from_single(
        crate::harness::UP_AK,
        crate::harness::UP_SK,
    ));
    let service = b.build();
    let cert_chain = rustls_pemfile::certs(&mut std::fs::read(&cert).unwrap().as_slice())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pemfile::private_key(&mut std::fs::read(&key).unwrap().as_slice())
        .unwrap()
        .unwrap();
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(cert_chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (acceptor, service) = (acceptor.clone(), service.clone());
            tokio::spawn(async move {
                if let Ok(stream) = acceptor.accept(socket).await {
                    let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = conn.serve_connection(TokioIo::new(stream), service).await;
                }
            });
        }
    });
    let placeholder = Upstream::s3s_fs().await;
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    let with_ca = |ca_bundle: Option<std::path::PathBuf>| {
        let mut config = gateway_config(&placeholder, keyring.clone());
        config.upstream = kura_gateway::config::UpstreamConfig::S3 {
            url: format!("https://127.0.0.1:{}", up_addr.port()),
            region: "us-east-1".into(),
            path_style: true,
            ca_bundle,
            credentials: Some((crate::harness::UP_AK.into(), crate::harness::UP_SK.into())),
            timeout: kura_gateway::config::DEFAULT_UPSTREAM_TIMEOUT,
        };
        config
    };
    let gw = kura_gateway::server::start(with_ca(Some(ca)))
        .await
        .unwrap();
    let c = crate::harness::client(gw.addr, AK, SK);
    c.create_bucket().bucket(BUCKET).send().await.unwrap();
    c.put_object()
        .bucket(BUCKET)
        .key("k")
        .body(b"over tls".to_vec().into())
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket(BUCKET).key("k").send().await.unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"over tls"
    );
    gw.shutdown().await;
    let untrusting = kura_gateway::server::start(with_ca(None)).await.unwrap();
    let c = crate::harness::client(untrusting.addr, AK, SK);
    let err = c
        .head_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        crate::harness::status(&err),
        Some(500),
        "an upstream certificate from an unknown CA is refused"
    );
    untrusting.shutdown().await;
}

/// A hand-signed empty PUT (`UNSIGNED-PAYLOAD`), with or without `Expect: 100-continue`,
/// on a keep-alive connection; returns the response head, lower-cased.
async fn empty_put_head(addr: std::net::SocketAddr, key: &str, expect: bool) -> String {
    use crate::harness::sigv4_now;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (stamp, scope, k) = sigv4_now();
    let host = addr.to_string();
    let path = format!("/{BUCKET}/{key}");
    let signed = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "PUT\n{path}\n\nhost:{host}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:{stamp}\n\n{signed}\nUNSIGNED-PAYLOAD"
    );
    let sig = crate::harness::sigv4_signature(&k, &stamp, &scope, &canonical);
    let expect = if expect {
        "Expect: 100-continue\r\n"
    } else {
        ""
    };
    let req = format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n{expect}Authorization: AWS4-HMAC-SHA256 Credential={AK}/{scope}, SignedHeaders={signed}, Signature={sig}\r\nContent-Length: 0\r\n\r\n"
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).await.unwrap(),
            1,
            "connection closed mid-head"
        );
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

/// botocore (aws-cli `s3 sync` of a tree with an empty file) sends `Expect: 100-continue`
/// on an empty PUT; hyper answers at once, without `100 Continue`, and botocore then
/// misreads the next response on that connection and waits 60 s for it.
#[tokio::test]
async fn an_empty_put_expecting_100_continue_gets_a_fresh_connection_next_time() {
    let env = Env::start().await;
    let head = empty_put_head(env.gateway.addr, "empty-expect", true).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    let head = empty_put_head(env.gateway.addr, "empty-plain", false).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
}

/// Shutdown does not wait for connections that have sent nothing (a probe's, or a
/// client's idle keep-alive connection): only requests in flight are drained.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_does_not_wait_for_idle_connections() {
    let env = Env::start().await;
    let _idle = tokio::net::TcpStream::connect(env.gateway.addr)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    env.gateway.shutdown().await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
}

/// A connection to the TLS listener that never starts its handshake is closed once the
/// handshake's time is up; hyper's header timer starts only after it, so without that
/// limit the connection and its task were held for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_tls_handshake_that_never_starts_is_cut_off() {
    let upstream = Upstream::s3s_fs().await;
    let certs = tempfile::tempdir().unwrap();
    let (_ca, cert, key) = certificates(certs.path());
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    let mut config = gateway_config(&upstream, keyring);
    config.tls = Some(TlsFiles { cert, key });
    let gw = kura_gateway::server::start(config).await.unwrap();
    let socket = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    crate::harness::closed_after(socket, kura_gateway::server::TLS_HANDSHAKE_TIMEOUT).await;
}

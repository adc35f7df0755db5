//! Virtual-host-style requests (`BUCKET.DOMAIN`) with a configured base domain, next to
//! path-style ones, over a hand-signed SigV4 request (the SDK would need DNS for the name).

use std::sync::Arc;

use crate::harness::{AK, SK, Upstream, client, gateway_config, pseudo_random, sigv4_now};

/// A SigV4-signed GET with `UNSIGNED-PAYLOAD` for `host` and `path`.
fn signed_get(host: &str, path: &str) -> String {
    let (stamp, scope, k) = sigv4_now();
    let signed = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "GET\n{path}\n\nhost:{host}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:{stamp}\n\n{signed}\nUNSIGNED-PAYLOAD"
    );
    let sig = crate::harness::sigv4_signature(&k, &stamp, &scope, &canonical);
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nAuthorization: AWS4-HMAC-SHA256 Credential={AK}/{scope}, SignedHeaders={signed}, Signature={sig}\r\nConnection: close\r\n\r\n"
    )
}

async fn send(addr: std::net::SocketAddr, raw: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn bucket_in_the_host_name_and_in_the_path_both_work() {
    let upstream = Upstream::s3s_fs().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    let mut config = gateway_config(&upstream, keyring);
    config.listen = format!("127.0.0.1:{port}").parse().unwrap();
    config.virtual_host_domain = Some(format!("s3.localhost:{port}"));
    let gw = kura_gateway::server::start(config).await.unwrap();
    // Path style through the SDK, with the base domain as the host.
    let c = client(gw.addr, AK, SK);
    c.create_bucket().bucket("vhost").send().await.unwrap();
    let body = pseudo_random(70_000, 2);
    c.put_object()
        .bucket("vhost")
        .key("dir/file")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    // Virtual-host style: the bucket is in the Host header, the path is only the key.
    let resp = send(
        gw.addr,
        &signed_get(&format!("vhost.s3.localhost:{port}"), "/dir/file"),
    )
    .await;
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&resp[..split]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(&resp[split + 4..], &body[..]);
    // And path style with the base domain as Host.
    let resp = send(
        gw.addr,
        &signed_get(&format!("s3.localhost:{port}"), "/vhost/dir/file"),
    )
    .await;
    assert!(resp.starts_with(b"HTTP/1.1 200"));
    // Regression: path style with any other host name (a sidecar's `localhost`, a
    // Kubernetes service name) took that name for the bucket.
    for host in [format!("localhost:{port}"), "kura-gateway".to_string()] {
        let resp = send(gw.addr, &signed_get(&host, "/vhost/dir/file")).await;
        let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&resp[..split]);
        assert!(head.starts_with("HTTP/1.1 200"), "{host}: {head}");
        assert_eq!(&resp[split + 4..], &body[..], "{host}");
    }
    // Regression: objects named like the admin endpoints, read virtual-host style, were
    // answered with the endpoints (the Prometheus text as the object's body, 200).
    for name in ["metrics", "healthz", "readyz"] {
        let content = format!("the object {name}").into_bytes();
        c.put_object()
            .bucket("vhost")
            .key(name)
            .body(content.clone().into())
            .send()
            .await
            .unwrap();
        let resp = send(
            gw.addr,
            &signed_get(&format!("vhost.s3.localhost:{port}"), &format!("/{name}")),
        )
        .await;
        let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        assert_eq!(&resp[split + 4..], &content[..], "{name}");
    }
    // The endpoints still answer on the base domain and other names.
    for host in [format!("s3.localhost:{port}"), format!("localhost:{port}")] {
        let raw = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let resp = send(gw.addr, &raw).await;
        assert!(resp.starts_with(b"HTTP/1.1 200"), "{host}");
        assert!(resp.ends_with(b"ok\n"), "{host}");
    }
    gw.shutdown().await;
}

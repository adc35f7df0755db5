//! The gateway bounded under load: a cap on connections (503 SlowDown beyond it), idle
//! timeouts on request heads, bodies and responses a client stops reading, and a limit on
//! XML bodies. Everything here runs on loopback, is bounded in count and time, and stops by
//! itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use kura_gateway::config::Limits;
use kura_gateway::server::Running;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::harness::{AK, BUCKET, SK, client, gateway_config};
use kura_testkit::metrics;
use kura_testkit::upstream::Upstream;

/// A gateway with `limits` in front of a fresh upstream, and a bucket made through it.
async fn gateway_with(limits: Limits) -> (Upstream, Running) {
    let upstream = Upstream::s3s_fs().await;
    let mut config = gateway_config(&upstream, kura_testkit::gateway::keyring());
    config.limits = limits;
    let gateway = kura_gateway::server::start(config).await.unwrap();
    client(gateway.addr, AK, SK)
        .create_bucket()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    (upstream, gateway)
}

/// A client without the SDK's retries: [`patiently`] retries here, so that what the
/// test allows is plain (the SDK's retry quota, shared by its clients, would run out).
fn plain_client(addr: SocketAddr) -> aws_sdk_s3::Client {
    let conf = client(addr, AK, SK)
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// Runs `call` until it succeeds, as a client told to slow down (or cut off) would, for at
/// most a minute, a fifth of a second apart.
async fn patiently<T, E: std::fmt::Debug, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut call: impl FnMut() -> F,
) -> Result<T, String> {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(format!("{what}: {e:?}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The request line's target and the `host:port` of a presigned URL.
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, target) = rest.split_once('/').unwrap();
    (host.to_string(), format!("/{target}"))
}

/// Reads until the gateway closes the connection or `limit` passes; what it read.
async fn read_until_closed(socket: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut all = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(limit, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .ok()
    .map(|()| all)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_beyond_the_cap_is_told_to_slow_down_and_when_to_retry() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let (_upstream, gateway) = gateway_with(limits).await;
    // Two connections hold the two places (sending nothing yet).
    let _held = [
        TcpStream::connect(gateway.addr).await.unwrap(),
        TcpStream::connect(gateway.addr).await.unwrap(),
    ];
    let mut third = TcpStream::connect(gateway.addr).await.unwrap();
    third
        .write_all(b"GET /bucket/x HTTP/1.1\r\nHost: gateway\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut third, Duration::from_secs(10))
        .await
        .expect("answered, then closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(answer.contains("<Code>SlowDown</Code>"), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_stops_sending_its_body_is_cut_after_the_idle_timeout() {
    let limits = Limits {
        idle_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let (_upstream, gateway) = gateway_with(limits).await;
    let url = client(gateway.addr, AK, SK)
        .put_object()
        .bucket(BUCKET)
        .key("half")
        .presigned(PresigningConfig::expires_in(Duration::from_mins(5)).unwrap())
        .await
        .unwrap();
    let (host, target) = split_url(url.uri());
    let mut socket = TcpStream::connect(gateway.addr).await.unwrap();
    let head = format!("PUT {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(&[7u8; 1000]).await.unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut socket, Duration::from_secs(15))
        .await
        .expect("the gateway ends a request whose body stopped");
    assert!(started.elapsed() < Duration::from_secs(10));
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(metrics::sum(gateway.addr.port(), "kura_connections_timed_out_total") >= 1);
    let head = client(gateway.addr, AK, SK)
        .head_object()
        .bucket(BUCKET)
        .key("half")
        .send()
        .await;
    assert!(head.is_err(), "no object from a body that stopped");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_stops_reading_its_response_is_cut_after_the_idle_timeout() {
    let limits = Limits {
        idle_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let (_upstream, gateway) = gateway_with(limits).await;
    let c = client(gateway.addr, AK, SK);
    let body = kura_testkit::data::pseudo_random(64 << 20, 3);
    c.put_object()
        .bucket(BUCKET)
        .key("big")
        .body(ByteStream::from(body))
        .send()
        .await
        .unwrap();
    let url = c
        .get_object()
        .bucket(BUCKET)
        .key("big")
        .presigned(PresigningConfig::expires_in(Duration::from_mins(5)).unwrap())
        .await
        .unwrap();
    let (host, target) = split_url(url.uri());
    let mut socket = TcpStream::connect(gateway.addr).await.unwrap();
    let head = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    // Read nothing while the gateway's writes fill the socket buffers and wait.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(metrics::sum(gateway.addr.port(), "kura_connections_timed_out_total") >= 1);
    // What was sent before the cut is less than the object, then the connection ends.
    let got = read_until_closed(&mut socket, Duration::from_secs(30))
        .await
        .expect("closed");
    assert!(got.len() < 64 << 20, "{} bytes", got.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_xml_body_over_two_mebibytes_is_refused() {
    let (_upstream, gateway) = gateway_with(Limits::default()).await;
    let c = client(gateway.addr, AK, SK);
    let ids: Vec<_> = (0..2200)
        .map(|i| {
            aws_sdk_s3::types::ObjectIdentifier::builder()
                .key(format!("{i:04}-{}", "k".repeat(1000)))
                .build()
                .unwrap()
        })
        .collect();
    let delete = aws_sdk_s3::types::Delete::builder()
        .set_objects(Some(ids))
        .build()
        .unwrap();
    let err = c
        .delete_objects()
        .bucket(BUCKET)
        .delete(delete)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        crate::harness::code(&err).as_deref(),
        Some("MaxMessageLengthExceeded"),
        "{err:?}"
    );
}

/// 2,000 connections that send nothing, held open while 64 clients each PUT and GET an
/// object, with the default cap (512) and a 2 s idle timeout. The clients are told to slow
/// down while the idle ones hold the cap, and all succeed once the timeout closes those;
/// the process's file descriptors and memory stay bounded, and every idle connection is
/// closed by the gateway.
#[tokio::test(flavor = "multi_thread")]
async fn two_thousand_idle_connections_neither_exhaust_the_gateway_nor_keep_clients_out() {
    const IDLE: usize = 2000;
    const CLIENTS: usize = 64;
    let limits = Limits {
        idle_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    // Both ends of 2,000 connections, and the rest: more than a 1,024 soft limit allows.
    let want = 8192;
    let rustix::process::Rlimit { current, maximum } =
        rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if current.is_some_and(|c| c < want) {
        let raised = maximum.map_or(want, |m| m.min(want));
        assert!(
            raised >= 4600,
            "this machine allows only {maximum:?} open files"
        );
        rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(raised),
                maximum,
            },
        )
        .unwrap();
    }
    let (_upstream, gateway) = gateway_with(limits).await;
    let fds_before = open_fds();
    let rss_before = rss_kib();
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(gateway.addr).await.unwrap());
    }
    let started = Instant::now();
    let client = Arc::new(plain_client(gateway.addr));
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let body = kura_testkit::data::pseudo_random(256 * 1024, u64::try_from(i).unwrap());
            let key = format!("load/{i}");
            patiently(&format!("PUT {key}"), || {
                client
                    .put_object()
                    .bucket(BUCKET)
                    .key(&key)
                    .body(ByteStream::from(body.clone()))
                    .send()
            })
            .await?;
            let got = patiently(&format!("GET {key}"), || async {
                let out = client.get_object().bucket(BUCKET).key(&key).send().await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(out.body.collect().await?)
            })
            .await?
            .into_bytes();
            if got != body {
                return Err(format!("GET {key}: other bytes"));
            }
            Ok::<(), String>(())
        }));
    }
    let mut peak_fds = 0;
    for t in tasks {
        peak_fds = peak_fds.max(open_fds());
        t.await.unwrap().unwrap();
    }
    let served_in = started.elapsed();
    // The test's own 2,000 sockets, the gateway's side of at most the cap plus as many
    // being refused, the clients' connections and the upstream's.
    let bound = fds_before + IDLE + 2 * Limits::default().max_connections + 4 * CLIENTS;
    assert!(
        peak_fds <= bound,
        "{peak_fds} file descriptors open, bound {bound}"
    );
    let grown_mib = rss_kib().saturating_sub(rss_before) / 1024;
    assert!(grown_mib < 256, "resident memory grew by {grown_mib} MiB");
    assert!(served_in < Duration::from_mins(1), "{served_in:?}");
    // Every idle connection is closed by the gateway: unanswered, or told to slow down.
    for mut socket in idle {
        read_until_closed(&mut socket, Duration::from_secs(10))
            .await
            .expect("the gateway closed an idle connection");
    }
    assert!(metrics::sum(gateway.addr.port(), "kura_connections_refused_total") > 0);
    // The clients' pooled connections are idle too, and closed by the same timeout.
    drop(client);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        metrics::sum(gateway.addr.port(), "kura_connections_open"),
        1,
        "only /metrics's own"
    );
}

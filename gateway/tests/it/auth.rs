//! Authentication and authorization: wrong credentials, bucket scopes, ListBuckets.

use crate::harness::{
    AK, BUCKET, Env, LIMITED_AK, LIMITED_SK, SK, client, code, data, hex_sha256, hmac_sha256,
    send_raw, sigv4_now,
};

#[tokio::test(flavor = "multi_thread")]
async fn wrong_credentials_are_refused() {
    let env = Env::start().await;
    let unknown = client(env.gateway.addr, "nobody", SK);
    let err = unknown
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("InvalidAccessKeyId"));
    let bad_secret = client(env.gateway.addr, AK, "wrong-secret");
    let err = bad_secret
        .put_object()
        .bucket(BUCKET)
        .key("x")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("SignatureDoesNotMatch"));
    env.assert_absent("x", "a refused PUT stores nothing").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_sees_and_touches_only_its_buckets() {
    let env = Env::start().await;
    env.client
        .create_bucket()
        .bucket("limited")
        .send()
        .await
        .unwrap();
    let limited = client(env.gateway.addr, LIMITED_AK, LIMITED_SK);
    limited
        .put_object()
        .bucket("limited")
        .key("k")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    let err = limited
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("AccessDenied"));
    let err = limited
        .put_object()
        .bucket(BUCKET)
        .key("k")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("AccessDenied"));
    let err = limited
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("AccessDenied"));
    // Copying out of a bucket it may not read is refused too.
    env.put("secret", b"s").await;
    let err = limited
        .copy_object()
        .bucket("limited")
        .key("stolen")
        .copy_source(format!("{BUCKET}/secret"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("AccessDenied"));
    let names: Vec<String> = limited
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_string))
        .collect();
    assert_eq!(names, vec!["limited".to_string()]);
    let all: Vec<String> = env
        .client
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_string))
        .collect();
    assert!(all.contains(&BUCKET.to_string()) && all.contains(&"limited".to_string()));
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_with_dot_segments_are_refused() {
    let env = Env::start().await;
    let err = env
        .client
        .put_object()
        .bucket(BUCKET)
        .key("a/../../other/x")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("InvalidArgument"));
}

#[tokio::test(flavor = "multi_thread")]
async fn health_ready_and_metrics_answer() {
    let env = Env::start().await;
    env.put("m", b"x").await;
    let base = format!("http://{}", env.gateway.addr);
    let (s, _, body) = crate::harness::raw_http("GET", &format!("{base}/healthz"), b"").await;
    assert_eq!((s, body.as_slice()), (200, &b"ok\n"[..]));
    let (s, _, _) = crate::harness::raw_http("GET", &format!("{base}/readyz"), b"").await;
    assert_eq!(s, 200);
    let (s, _, body) = crate::harness::raw_http("GET", &format!("{base}/metrics"), b"").await;
    let text = String::from_utf8(body).unwrap();
    assert_eq!(s, 200);
    assert!(
        text.contains("kura_operations_total{operation=\"PutObject\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("kura_requests_total{operation=\"PutObject\",status=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("kura_requests_total{operation=\"healthz\",status=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("kura_request_duration_seconds_count{operation=\"PutObject\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("kura_upstream_requests_total{operation=\"PutObject\"} 1"),
        "{text}"
    );
    // A HEAD of a missing object is an upstream error the metrics count.
    let _ = env
        .client
        .head_object()
        .bucket(crate::harness::BUCKET)
        .key("missing")
        .send()
        .await;
    let (_, _, body) = crate::harness::raw_http("GET", &format!("{base}/metrics"), b"").await;
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("kura_upstream_errors_total{operation=\"HeadObject\""),
        "{text}"
    );
    assert!(
        text.contains("kura_requests_total{operation=\"HeadObject\",status=\"404\"} 1"),
        "{text}"
    );
    // A request refused before any operation ran is counted as `none`.
    let bad_secret = client(env.gateway.addr, crate::harness::AK, "wrong-secret");
    let _ = bad_secret
        .list_objects_v2()
        .bucket(crate::harness::BUCKET)
        .send()
        .await
        .unwrap_err();
    let (_, _, body) = crate::harness::raw_http("GET", &format!("{base}/metrics"), b"").await;
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("kura_requests_total{operation=\"none\",status=\"403\"}"),
        "{text}"
    );
    assert!(
        !text.contains("kura_requests_total{operation=\"ListObjectsV2\""),
        "{text}"
    );
    assert!(!text.contains(SK), "metrics must not carry secrets");
}

/// A PUT whose signature covers `x-amz-content-sha256` of `signed_for`, sending `body`.
fn signed_payload_put(host: &str, key: &str, signed_for: &[u8], body: &[u8]) -> Vec<u8> {
    let (stamp, scope, k) = sigv4_now();
    let path = format!("/{BUCKET}/{key}");
    let hash = hex_sha256(signed_for);
    let signed_headers = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "PUT\n{path}\n\nhost:{host}\nx-amz-content-sha256:{hash}\nx-amz-date:{stamp}\n\n{signed_headers}\n{hash}"
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex_sha256(canonical.as_bytes())
    );
    let signature = hex::encode(hmac_sha256(&k, to_sign.as_bytes()));
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={AK}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
    );
    let mut req = format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: {hash}\r\nAuthorization: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// The signature covers the payload's SHA-256, so a body that differs from the one signed
/// (altered in transit) must be refused, with nothing stored; the signed one is accepted.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_is_not_the_signed_payload_is_refused() {
    let env = Env::start().await;
    let host = env.gateway.addr.to_string();
    let signed = data(300_000, 11);
    let resp = send_raw(
        env.gateway.addr,
        &signed_payload_put(&host, "signed", &signed, &signed),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert_eq!(env.get("signed").await, signed);

    let mut altered = signed.clone();
    altered[150_000] ^= 1;
    let resp = send_raw(
        env.gateway.addr,
        &signed_payload_put(&host, "altered", &signed, &altered),
    )
    .await;
    assert!(
        resp.starts_with("HTTP/1.1 400") && resp.contains("<Code>XAmzContentSHA256Mismatch</Code>"),
        "a body other than the signed one must get S3's XAmzContentSHA256Mismatch: {resp}"
    );
    env.assert_absent("altered", "a refused body stores nothing")
        .await;
}

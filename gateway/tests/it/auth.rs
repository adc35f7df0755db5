//! Authentication and authorization: wrong credentials, bucket scopes, ListBuckets.

use crate::harness::{
    AK, BUCKET, Env, LIMITED_AK, LIMITED_SK, SK, client, code, hex_sha256, hmac_sha256,
    pseudo_random, send_raw, sigv4_now,
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

/// A PUT whose signature covers `x-amz-content-sha256` of `signed_for`, sending `body`;
/// `key` as it goes in the path (URI-encoded).
pub(crate) fn signed_payload_put(host: &str, key: &str, signed_for: &[u8], body: &[u8]) -> Vec<u8> {
    let (stamp, scope, k) = sigv4_now();
    let path = format!("/{BUCKET}/{key}");
    let hash = hex_sha256(signed_for);
    let signed_headers = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "PUT\n{path}\n\nhost:{host}\nx-amz-content-sha256:{hash}\nx-amz-date:{stamp}\n\n{signed_headers}\n{hash}"
    );
    let signature = crate::harness::sigv4_signature(&k, &stamp, &scope, &canonical);
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
    let signed = pseudo_random(300_000, 11);
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

/// A presigned GET of `key` signed by hand (the SDK refuses to presign for more than a
/// week), valid for `expires` seconds from now.
fn presigned_get(host: &str, key: &str, expires: u64) -> Vec<u8> {
    let (stamp, scope, k) = sigv4_now();
    let path = format!("/{BUCKET}/{key}");
    let credential = format!("{AK}/{scope}").replace('/', "%2F");
    let query = format!(
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={credential}&X-Amz-Date={stamp}&X-Amz-Expires={expires}&X-Amz-SignedHeaders=host"
    );
    let canonical = format!("GET\n{path}\n{query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD");
    let signature = crate::harness::sigv4_signature(&k, &stamp, &scope, &canonical);
    format!(
        "GET {path}?{query}&X-Amz-Signature={signature} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// S3 takes presigned URLs valid for at most seven days; s3s takes any `X-Amz-Expires`, so
/// without the gateway's check a URL could be made to work for 136 years.
#[tokio::test(flavor = "multi_thread")]
async fn presigned_urls_valid_for_more_than_a_week_are_refused() {
    let env = Env::start().await;
    env.put("p", b"presigned").await;
    let host = env.gateway.addr.to_string();
    let week = 7 * 24 * 60 * 60;
    let resp = send_raw(env.gateway.addr, &presigned_get(&host, "p", week)).await;
    assert!(
        resp.starts_with("HTTP/1.1 200"),
        "a week is allowed: {resp}"
    );
    assert!(resp.ends_with("presigned"), "{resp}");
    for expires in [week + 1, u64::from(u32::MAX)] {
        let resp = send_raw(env.gateway.addr, &presigned_get(&host, "p", expires)).await;
        assert!(
            resp.starts_with("HTTP/1.1 400")
                && resp.contains("<Code>AuthorizationQueryParametersError</Code>"),
            "X-Amz-Expires={expires}: {resp}"
        );
    }
}

/// Regression: the gateway refuses SigV2 (s3s checks no clock for it), but looked for the
/// raw text `AWSAccessKeyId=` in the query, while s3s decodes parameter names: a URL that
/// spelled it `AWSAccessKey%49d` was verified as SigV2, with an expiry of the client's
/// choosing.
#[tokio::test(flavor = "multi_thread")]
async fn sigv2_presigned_urls_are_refused_however_they_spell_the_key() {
    use base64::Engine as _;
    let env = Env::start().await;
    env.put("v2", b"x").await;
    let expires = time::OffsetDateTime::now_utc().unix_timestamp() + 600;
    let to_sign = format!("GET\n\n\n{expires}\n/{BUCKET}/v2");
    let mac = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, SK.as_bytes()),
        to_sign.as_bytes(),
    );
    let signature: String = percent_encoding::utf8_percent_encode(
        &base64::engine::general_purpose::STANDARD.encode(mac.as_ref()),
        percent_encoding::NON_ALPHANUMERIC,
    )
    .to_string();
    let host = env.gateway.addr;
    for name in ["AWSAccessKeyId", "AWSAccessKey%49d"] {
        let raw = format!(
            "GET /{BUCKET}/v2?{name}={AK}&Expires={expires}&Signature={signature} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        );
        let resp = send_raw(host, raw.as_bytes()).await;
        assert!(
            resp.starts_with("HTTP/1.1 403") && resp.contains("signature version 2"),
            "{name}: {resp}"
        );
    }
}

/// POST form uploads (browser uploads signed with a SigV4 POST policy) are refused, and
/// s3s is not let to read the form's file into memory first.
#[tokio::test(flavor = "multi_thread")]
async fn signed_post_form_uploads_are_refused() {
    use base64::Engine as _;
    use std::fmt::Write as _;
    let env = Env::start().await;
    let host = env.gateway.addr;
    let (stamp, scope, k) = sigv4_now();
    let credential = format!("{AK}/{scope}");
    let policy = format!(
        r#"{{"expiration":"2099-01-01T00:00:00.000Z","conditions":[{{"bucket":"{BUCKET}"}},["starts-with","$key",""],{{"x-amz-algorithm":"AWS4-HMAC-SHA256"}},{{"x-amz-credential":"{credential}"}},{{"x-amz-date":"{stamp}"}}]}}"#
    );
    let policy = base64::engine::general_purpose::STANDARD.encode(policy);
    let signature = hex::encode(hmac_sha256(&k, policy.as_bytes()));
    let boundary = "kura-boundary";
    let mut body = String::new();
    for (name, value) in [
        ("key", "posted"),
        ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
        ("x-amz-credential", &credential),
        ("x-amz-date", &stamp),
        ("policy", &policy),
        ("x-amz-signature", &signature),
    ] {
        write!(
            body,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        )
        .unwrap();
    }
    let form = |file_len: usize| {
        let mut body = body.clone();
        write!(
            body,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\nContent-Type: application/octet-stream\r\n\r\n{}\r\n--{boundary}--\r\n",
            "x".repeat(file_len)
        )
        .unwrap();
        format!(
            "POST /{BUCKET} HTTP/1.1\r\nHost: {host}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    for len in [0, 1000] {
        let resp = send_raw(host, form(len).as_bytes()).await;
        assert!(
            resp.starts_with("HTTP/1.1 501") && resp.contains("<Code>NotImplemented</Code>"),
            "{resp}"
        );
    }
    env.assert_absent("posted", "a refused form stores nothing")
        .await;
}

/// Regression: s3s parses a POST form's fields before it checks any signature, so anyone
/// could make the gateway hold up to 20 MiB per connection, parsed again after every piece,
/// for as long as they trickled a form that never ends. The form is refused unread.
#[tokio::test(flavor = "multi_thread")]
async fn an_unsigned_form_that_never_ends_is_refused_unread() {
    let env = Env::start().await;
    let host = env.gateway.addr;
    let raw = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n--b\r\nContent-Disposition: form-da\r\n"
    );
    let resp = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        send_raw(host, raw.as_bytes()),
    )
    .await
    .expect("answered and closed without waiting for the body");
    assert!(
        resp.starts_with("HTTP/1.1 501") && resp.contains("<Code>NotImplemented</Code>"),
        "{resp}"
    );
}

/// A connection that sends nothing is closed after the header read timeout, rather than
/// held open for ever.
#[tokio::test(flavor = "multi_thread")]
async fn silent_connections_are_closed() {
    let env = Env::start().await;
    let socket = tokio::net::TcpStream::connect(env.gateway.addr)
        .await
        .unwrap();
    crate::harness::closed_after(socket, kura_gateway::config::DEFAULT_IDLE_TIMEOUT).await;
}

/// A multipart upload of an object whose Content-Type is `multipart/form-data`: s3s takes
/// every POST of that type for a form upload, so it cannot be served; it gets the same
/// clear refusal rather than a form parse error.
#[tokio::test(flavor = "multi_thread")]
async fn a_multipart_upload_of_a_form_data_object_is_refused_clearly() {
    let env = Env::start().await;
    let err = env
        .client
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("form.bin")
        .content_type("multipart/form-data; boundary=x")
        .send()
        .await
        .unwrap_err();
    let err = err.into_service_error();
    assert_eq!(err.meta().code(), Some("NotImplemented"), "{err:?}");
    assert!(
        err.meta()
            .message()
            .is_some_and(|m| m.contains("multipart/form-data")),
        "{err:?}"
    );
}

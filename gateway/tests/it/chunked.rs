//! Signed aws-chunked uploads (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`), as minio-go sends them
//! for restic and Kopia: without `Content-Encoding: aws-chunked`, every chunk signed. The
//! request is built by hand here (SigV4, RFC-style), so the test also controls tampering.

use crate::harness::{
    AK, BUCKET, Env, hex_sha256, hmac_sha256, pseudo_random, send_raw as send, sigv4_now,
};

/// The raw request: head and chunked body, signed for `host` now.
fn signed_chunked_put(
    host: &str,
    key: &str,
    payload: &[u8],
    chunk: usize,
    tamper_chunk: Option<usize>,
) -> Vec<u8> {
    let (stamp, scope, k) = sigv4_now();
    let path = format!("/{BUCKET}/{key}");
    let mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
    let signed_headers = "host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length";
    let canonical = format!(
        "PUT\n{path}\n\nhost:{host}\nx-amz-content-sha256:{mode}\nx-amz-date:{stamp}\nx-amz-decoded-content-length:{}\n\n{signed_headers}\n{mode}",
        payload.len()
    );
    let mut prev = crate::harness::sigv4_signature(&k, &stamp, &scope, &canonical);
    let seed = prev.clone();
    let mut body = Vec::new();
    let empty = hex_sha256(b"");
    let mut pieces: Vec<&[u8]> = payload.chunks(chunk).collect();
    pieces.push(&[]);
    for (i, piece) in pieces.iter().enumerate() {
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{stamp}\n{scope}\n{prev}\n{empty}\n{}",
            hex_sha256(piece)
        );
        prev = hex::encode(hmac_sha256(&k, sts.as_bytes()));
        body.extend_from_slice(format!("{:x};chunk-signature={prev}\r\n", piece.len()).as_bytes());
        let mut bytes = piece.to_vec();
        if tamper_chunk == Some(i) {
            bytes[0] ^= 1;
        }
        body.extend_from_slice(&bytes);
        body.extend_from_slice(b"\r\n");
    }
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={AK}/{scope}, SignedHeaders={signed_headers}, Signature={seed}"
    );
    let mut req = format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: {mode}\r\nx-amz-decoded-content-length: {}\r\nAuthorization: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        payload.len(),
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    req
}

#[tokio::test(flavor = "multi_thread")]
async fn signed_chunks_are_verified_and_never_stored() {
    let env = Env::start().await;
    let host = env.gateway.addr.to_string();
    let payload = pseudo_random(200_000, 6);
    let resp = send(
        env.gateway.addr,
        &signed_chunked_put(&host, "chunked", &payload, 65_536, None),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert_eq!(env.get("chunked").await, payload);
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("chunked")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.content_length(),
        Some(200_000),
        "chunk framing is not part of the object"
    );
    // A chunk altered after signing: rejected, and nothing stored under the key.
    let resp = send(
        env.gateway.addr,
        &signed_chunked_put(&host, "tampered", &payload, 65_536, Some(1)),
    )
    .await;
    assert!(
        resp.starts_with("HTTP/1.1 403") && resp.contains("<Code>SignatureDoesNotMatch</Code>"),
        "a tampered chunk must get SignatureDoesNotMatch: {resp}"
    );
    env.assert_absent("tampered", "a tampered chunk stores nothing")
        .await;
}

/// The head of a `STREAMING-UNSIGNED-PAYLOAD-TRAILER` PUT signed for `host` now, with a
/// SHA-256 trailer, `decoded` payload bytes and a body of `len` bytes to follow.
fn unsigned_trailer_head(host: &str, key: &str, decoded: usize, len: usize) -> Vec<u8> {
    let (stamp, scope, k) = sigv4_now();
    let path = format!("/{BUCKET}/{key}");
    let mode = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
    let signed_headers = "content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-trailer";
    let canonical = format!(
        "PUT\n{path}\n\ncontent-encoding:aws-chunked\nhost:{host}\nx-amz-content-sha256:{mode}\nx-amz-date:{stamp}\nx-amz-decoded-content-length:{decoded}\nx-amz-trailer:x-amz-checksum-sha256\n\n{signed_headers}\n{mode}"
    );
    let sig = crate::harness::sigv4_signature(&k, &stamp, &scope, &canonical);
    format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Encoding: aws-chunked\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: {mode}\r\nx-amz-decoded-content-length: {decoded}\r\nx-amz-trailer: x-amz-checksum-sha256\r\nAuthorization: AWS4-HMAC-SHA256 Credential={AK}/{scope}, SignedHeaders={signed_headers}, Signature={sig}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// Regression: the AWS common runtime (aws-cli and boto3 with CRT, Mountpoint) sends a
/// whole body as one unsigned chunk; one above the 16 MiB a signed chunk may hold is
/// re-framed, not refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_whole_body_in_one_unsigned_chunk_is_stored() {
    use base64::Engine as _;
    let env = Env::start().await;
    let host = env.gateway.addr.to_string();
    let payload = pseudo_random(20 << 20, 8);
    let sum = ring::digest::digest(&ring::digest::SHA256, &payload);
    let mut body = format!("{:x}\r\n", payload.len()).into_bytes();
    body.extend_from_slice(&payload);
    body.extend_from_slice(
        format!(
            "\r\n0\r\nx-amz-checksum-sha256:{}\r\n\r\n",
            base64::engine::general_purpose::STANDARD.encode(sum)
        )
        .as_bytes(),
    );
    let mut req = unsigned_trailer_head(&host, "crt", payload.len(), body.len());
    req.extend_from_slice(&body);
    let resp = send(env.gateway.addr, &req).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(env.get("crt").await == payload, "the object is the payload");
}

/// Regression: s3s collects each aws-chunked chunk whole before it looks at it, and a
/// chunk header may declare up to 4 GiB; with `STREAMING-UNSIGNED-PAYLOAD-TRAILER` no
/// chunk signature is needed to try. A chunk longer than the declared decoded length is
/// refused as its header arrives, while the body is still coming.
#[tokio::test(flavor = "multi_thread")]
async fn a_chunk_declaring_gigabytes_is_refused_at_its_header() {
    let env = Env::start().await;
    let host = env.gateway.addr.to_string();
    let mut req = unsigned_trailer_head(&host, "huge-chunk", 10, 5_000_000_000);
    req.extend_from_slice(b"ffffffff\r\n");
    req.extend(std::iter::repeat_n(b'x', 65_536));
    // The rest of the 5 GB never comes: only a refusal at the header answers in time.
    let resp = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        send(env.gateway.addr, &req),
    )
    .await
    .expect("refused while the body was still coming");
    assert!(
        resp.starts_with("HTTP/1.1 400") && resp.contains("past the declared"),
        "{resp}"
    );
    env.assert_absent("huge-chunk", "nothing stored").await;
}

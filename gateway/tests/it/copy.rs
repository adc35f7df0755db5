//! CopyObject: re-wrapping to a new name keeps the body; a self-copy updates metadata; a
//! large object's body is copied server-side.

use aws_sdk_s3::types::MetadataDirective;

use crate::harness::{BUCKET, Env, pseudo_random};

/// Copies `key` onto itself with user metadata `k` set to `value` (and no other).
async fn replace_metadata(env: &Env, key: &str, value: &str) {
    env.client
        .copy_object()
        .bucket(BUCKET)
        .key(key)
        .copy_source(format!("{BUCKET}/{key}"))
        .metadata_directive(MetadataDirective::Replace)
        .metadata("k", value)
        .send()
        .await
        .unwrap();
}

/// Copies `from` to `to` in the test bucket; returns the ETag of the result.
async fn copy(env: &Env, from: &str, to: &str) -> String {
    let out = env
        .client
        .copy_object()
        .bucket(BUCKET)
        .key(to)
        .copy_source(format!("{BUCKET}/{from}"))
        .send()
        .await
        .unwrap();
    out.copy_object_result()
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn copy_to_another_name_rewraps_and_keeps_metadata() {
    let env = Env::start().await;
    let body = pseudo_random(3 * 65_536 + 9, 2);
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("a")
        .metadata("k", "v")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    let etag = copy(&env, "a", "b").await;
    assert_eq!(env.get("b").await, body);
    assert_eq!(env.get("a").await, body);
    let head = env.head("b").await;
    assert_eq!(
        head.e_tag(),
        Some(etag.as_str()),
        "CopyObject result and HEAD agree on the ETag"
    );
    assert_eq!(
        head.metadata().unwrap().get("k").map(String::as_str),
        Some("v")
    );
    // Only the header differs between the two stored objects.
    let a = std::fs::read(env.stored_path(BUCKET, "a")).unwrap();
    let b = std::fs::read(env.stored_path(BUCKET, "b")).unwrap();
    assert_eq!(
        a[164..],
        b[164..],
        "the body stays; only the header is re-wrapped"
    );
    assert_ne!(a[..164], b[..164]);
}

#[tokio::test(flavor = "multi_thread")]
async fn copy_with_replaced_metadata() {
    let env = Env::start().await;
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("a")
        .metadata("k", "old")
        .body(b"hello".to_vec().into())
        .send()
        .await
        .unwrap();
    replace_metadata(&env, "a", "new").await;
    let head = env.head("a").await;
    assert_eq!(
        head.metadata().unwrap().get("k").map(String::as_str),
        Some("new")
    );
    assert_eq!(env.get("a").await, b"hello");
}

/// Regression: a copy with replaced metadata sealed the metadata with the cipher the
/// gateway seals new objects with, and its header copy with the source's; once the two
/// differed (a cipher change in the configuration), every HEAD and GET of the copy was 500.
#[tokio::test(flavor = "multi_thread")]
async fn replaced_metadata_of_an_object_under_another_cipher_opens() {
    let env = Env::start().await;
    env.put("aes", b"written under AES-256-GCM").await;
    let mut config = crate::harness::gateway_config(&env.upstream, env.keyring.clone());
    config.cipher = kura_keys::Cipher::ChaCha20Poly1305;
    let chacha = kura_gateway::server::start(config).await.unwrap();
    let client = crate::harness::client(chacha.addr, crate::harness::AK, crate::harness::SK);
    client
        .copy_object()
        .bucket(BUCKET)
        .key("copy")
        .copy_source(format!("{BUCKET}/aes"))
        .metadata_directive(MetadataDirective::Replace)
        .metadata("k", "v")
        .send()
        .await
        .unwrap();
    for c in [&client, &env.client] {
        let head = c
            .head_object()
            .bucket(BUCKET)
            .key("copy")
            .send()
            .await
            .unwrap();
        assert_eq!(
            head.metadata().unwrap().get("k").map(String::as_str),
            Some("v")
        );
        assert_eq!(
            crate::harness::get(c, "copy").await,
            b"written under AES-256-GCM"
        );
    }
}

/// Regression: a copy kept the source's Content-Type and the like but dropped its
/// Content-Language and redirect location, and a copy above 8 MiB (an upload of the
/// gateway's own) dropped them even when the request named them.
#[tokio::test(flavor = "multi_thread")]
async fn copies_keep_the_headers_of_their_source() {
    let env = Env::start().await;
    for (source, len) in [("small", 1000), ("large", 9 << 20)] {
        env.client
            .put_object()
            .bucket(BUCKET)
            .key(source)
            .content_language("de-CH")
            .website_redirect_location("/elsewhere")
            .body(pseudo_random(len, 7).into())
            .send()
            .await
            .unwrap();
        let copied = format!("{source}-copy");
        copy(&env, source, &copied).await;
        let head = env.head(&copied).await;
        assert_eq!(head.content_language(), Some("de-CH"), "{source}");
        assert_eq!(
            head.website_redirect_location(),
            Some("/elsewhere"),
            "{source}"
        );
        env.client
            .copy_object()
            .bucket(BUCKET)
            .key(&copied)
            .copy_source(format!("{BUCKET}/{source}"))
            .metadata_directive(MetadataDirective::Replace)
            .content_language("fr")
            .send()
            .await
            .unwrap();
        let head = env.head(&copied).await;
        assert_eq!(head.content_language(), Some("fr"), "{source}, replaced");
        assert_eq!(env.get(&copied).await, pseudo_random(len, 7), "{source}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn large_copy_moves_the_body_server_side() {
    let env = Env::start().await;
    let body = pseudo_random(20 * 1024 * 1024 + 12_345, 5);
    env.put("big", &body).await;
    let etag = copy(&env, "big", "copy").await;
    assert!(
        etag.ends_with("-2\""),
        "stored as two parts upstream (the first through the gateway, the rest copied): {etag}"
    );
    assert!(env.get("copy").await == body);
    let boundary = 8 * 1024 * 1024 - 164;
    let range = format!("bytes={}-{}", boundary - 100, boundary + 100);
    assert!(env.get_range("copy", &range).await.unwrap() == body[boundary - 100..=boundary + 100]);
    let head = env.head("copy").await;
    assert_eq!(head.content_length(), Some(body.len() as i64));
    assert_eq!(head.e_tag(), Some(etag.as_str()));
    let listed = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix("copy")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.contents()[0].size(), Some(body.len() as i64));
    let a = std::fs::read(env.stored_path(BUCKET, "big")).unwrap();
    let b = std::fs::read(env.stored_path(BUCKET, "copy")).unwrap();
    assert!(
        a[164..] == b[164..],
        "the body stays; only the header is re-wrapped"
    );
    assert_ne!(a[..164], b[..164]);
    let metrics =
        crate::harness::raw_http("GET", &format!("http://{}/metrics", env.gateway.addr), b"")
            .await
            .2;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("kura_upstream_requests_total{operation=\"UploadPartCopy\"} 1"),
        "{metrics}"
    );

    // Onto itself with new metadata: the same body under the same name.
    replace_metadata(&env, "copy", "new").await;
    assert!(env.get("copy").await == body);
    let head = env.head("copy").await;
    assert_eq!(
        head.metadata().unwrap().get("k").map(String::as_str),
        Some("new")
    );
    assert_eq!(head.content_length(), Some(body.len() as i64));
}

/// As S3: a copy onto itself that changes nothing is refused (400 InvalidRequest); one that
/// replaces the metadata is a copy like any other.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_onto_itself_that_changes_nothing_is_refused() {
    let env = Env::start().await;
    env.put("same", b"body").await;
    let err = env
        .client
        .copy_object()
        .bucket(BUCKET)
        .key("same")
        .copy_source(format!("{BUCKET}/same"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::harness::status(&err), Some(400));
    assert_eq!(
        crate::harness::code(&err).as_deref(),
        Some("InvalidRequest")
    );
    replace_metadata(&env, "same", "v").await;
    assert_eq!(env.get("same").await, b"body");
}

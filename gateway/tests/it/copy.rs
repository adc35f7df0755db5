//! CopyObject: re-wrapping to a new name keeps the body; a self-copy updates metadata.

use aws_sdk_s3::types::MetadataDirective;

use crate::harness::{BUCKET, Env, data};

#[tokio::test(flavor = "multi_thread")]
async fn copy_to_another_name_rewraps_and_keeps_metadata() {
    let env = Env::start().await;
    let body = data(3 * 65_536 + 9, 2);
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("a")
        .metadata("k", "v")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    let out = env
        .client
        .copy_object()
        .bucket(BUCKET)
        .key("b")
        .copy_source(format!("{BUCKET}/a"))
        .send()
        .await
        .unwrap();
    let etag = out
        .copy_object_result()
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    assert_eq!(env.get("b").await, body);
    assert_eq!(env.get("a").await, body);
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("b")
        .send()
        .await
        .unwrap();
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
    env.client
        .copy_object()
        .bucket(BUCKET)
        .key("a")
        .copy_source(format!("{BUCKET}/a"))
        .metadata_directive(MetadataDirective::Replace)
        .metadata("k", "new")
        .send()
        .await
        .unwrap();
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("a")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.metadata().unwrap().get("k").map(String::as_str),
        Some("new")
    );
    assert_eq!(env.get("a").await, b"hello");
}

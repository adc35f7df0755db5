//! Presigned URLs (query auth): GET and PUT fetched with a plain HTTP client, and expiry.

use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;

use crate::harness::{BUCKET, Env, pseudo_random, raw_http};

#[tokio::test(flavor = "multi_thread")]
async fn presigned_get_and_put_work_with_a_plain_client() {
    let env = Env::start().await;
    let body = pseudo_random(100_000, 4);
    env.put("p", &body).await;
    let get = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("p")
        .presigned(PresigningConfig::expires_in(Duration::from_mins(5)).unwrap())
        .await
        .unwrap();
    let (status, _, got) = raw_http("GET", get.uri(), b"").await;
    assert_eq!(status, 200);
    assert_eq!(got, body);
    let up = pseudo_random(70_000, 5);
    let put = env
        .client
        .put_object()
        .bucket(BUCKET)
        .key("q")
        .presigned(PresigningConfig::expires_in(Duration::from_mins(5)).unwrap())
        .await
        .unwrap();
    let (status, _, _) = raw_http("PUT", put.uri(), &up).await;
    assert_eq!(status, 200);
    assert_eq!(env.get("q").await, up);
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_presigned_url_is_refused() {
    let env = Env::start().await;
    env.put("p", b"x").await;
    let get = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("p")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(1)).unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, _, body) = raw_http("GET", get.uri(), b"").await;
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
}

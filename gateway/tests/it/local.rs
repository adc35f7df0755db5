//! The embedded default's store (`LocalDir`), through a gateway on loopback: answers where
//! plain s3s-fs differs from S3.

use std::sync::Arc;

use kura_gateway::config::UpstreamConfig;
use kura_keys::Keyring;

use crate::harness::{AK, BUCKET, SK, client, data, gateway_config, start_upstream, status};

/// rclone HEADs `tree` before copying into `tree/`; s3s-fs answered 500 (reading the
/// directory as a file) and every retry of the gateway and rclone followed.
#[tokio::test]
async fn head_get_and_delete_of_a_key_naming_a_directory_answer_as_s3_does() {
    let dir = tempfile::tempdir().unwrap();
    let keyring = Arc::new(Keyring::generate("test".into()).unwrap());
    // The S3 settings are replaced by the local store; the rest is the usual test config.
    let unused = start_upstream().await;
    let mut config = gateway_config(&unused, keyring);
    config.upstream = UpstreamConfig::Local {
        dir: dir.path().to_path_buf(),
    };
    let gateway = kura_gateway::server::start(config).await.unwrap();
    let s3 = client(gateway.addr, AK, SK);
    s3.create_bucket().bucket(BUCKET).send().await.unwrap();
    let body = data(70_000, 9);
    s3.put_object()
        .bucket(BUCKET)
        .key("tree/a.bin")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();

    let head = s3.head_object().bucket(BUCKET).key("tree").send().await;
    assert_eq!(status(&head.unwrap_err()), Some(404));
    let get = s3.get_object().bucket(BUCKET).key("tree").send().await;
    assert_eq!(status(&get.unwrap_err()), Some(404));
    s3.delete_object()
        .bucket(BUCKET)
        .key("tree")
        .send()
        .await
        .unwrap();

    let got = s3
        .get_object()
        .bucket(BUCKET)
        .key("tree/a.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        body
    );
}

//! Object Lock uploads and copies: the ciphertext goes up with its Content-MD5 (single PUT,
//! or parts of bounded size), as B2 and AWS require. A recording wrapper around the real s3s-fs store
//! checks what the gateway sent; the store itself verifies the MD5s.

#![allow(clippy::wildcard_imports, reason = "the S3 DTO namespace")]

use std::sync::{Arc, Mutex};

use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::ObjectLockMode;
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result};

use crate::harness::{AK, BUCKET, SK, Upstream, client, gateway_config, pseudo_random};

/// Forwards to s3s-fs and records, for every PUT and part, whether Content-MD5 came along.
struct RecordingUpstream {
    inner: s3s_fs::FileSystem,
    md5_sent: Arc<Mutex<Vec<bool>>>,
}

#[async_trait::async_trait]
impl S3 for RecordingUpstream {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.inner.create_bucket(req).await
    }
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.md5_sent
            .lock()
            .unwrap()
            .push(req.input.content_md5.is_some());
        self.inner.put_object(req).await
    }
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.inner.create_multipart_upload(req).await
    }
    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.md5_sent
            .lock()
            .unwrap()
            .push(req.input.content_md5.is_some());
        self.inner.upload_part(req).await
    }
    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.inner.complete_multipart_upload(req).await
    }
    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.inner.upload_part_copy(req).await
    }
    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.inner.abort_multipart_upload(req).await
    }
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.inner.get_object(req).await
    }
    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.inner.head_object(req).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn locked_uploads_carry_the_md5_of_the_ciphertext() {
    let dir = tempfile::tempdir().unwrap();
    let md5_sent = Arc::new(Mutex::new(Vec::new()));
    let store = RecordingUpstream {
        inner: s3s_fs::FileSystem::new(dir.path()).unwrap(),
        md5_sent: md5_sent.clone(),
    };
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    // The config's upstream address is unused: the recording store is handed in directly.
    let placeholder = Upstream::s3s_fs().await;
    let gw = kura_gateway::server::start_with_upstream(
        gateway_config(&placeholder, keyring),
        kura_gateway::upstream::Upstream::from_s3(Arc::new(store)),
    )
    .await
    .unwrap();
    let c = client(gw.addr, AK, SK);
    c.create_bucket().bucket(BUCKET).send().await.unwrap();
    let until = DateTime::from_secs(4_000_000_000);
    for (key, len) in [("small", 100_000), ("large", 20 << 20)] {
        let body = pseudo_random(len, 5);
        c.put_object()
            .bucket(BUCKET)
            .key(key)
            .object_lock_mode(ObjectLockMode::Governance)
            .object_lock_retain_until_date(until)
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .unwrap();
        let got = c.get_object().bucket(BUCKET).key(key).send().await.unwrap();
        assert!(
            got.body.collect().await.unwrap().into_bytes().to_vec() == body,
            "{key} round trip"
        );
    }
    for (key, len) in [("small", 100_000), ("large", 20 << 20)] {
        let copy = format!("{key}-copy");
        c.copy_object()
            .bucket(BUCKET)
            .key(&copy)
            .copy_source(format!("{BUCKET}/{key}"))
            .object_lock_mode(ObjectLockMode::Governance)
            .object_lock_retain_until_date(until)
            .send()
            .await
            .unwrap();
        let got = c
            .get_object()
            .bucket(BUCKET)
            .key(&copy)
            .send()
            .await
            .unwrap();
        assert!(
            got.body.collect().await.unwrap().into_bytes().to_vec() == pseudo_random(len, 5),
            "{copy} round trip"
        );
    }
    let sent = md5_sent.lock().unwrap().clone();
    assert_eq!(
        sent.len(),
        1 + 3 + 1 + 1,
        "PUT: one for the small object, three 8 MiB parts for the large one; copies: one PUT \
         for the small one, the first part of the large one (the rest is copied upstream)"
    );
    assert!(
        sent.iter().all(|s| *s),
        "every locked upload request carries Content-MD5: {sent:?}"
    );

    // Regression: a locked write large enough to go up in parts dropped the client's
    // conditions, so If-None-Match: * replaced an existing object.
    let err = c
        .put_object()
        .bucket(BUCKET)
        .key("large")
        .if_none_match("*")
        .object_lock_mode(ObjectLockMode::Governance)
        .object_lock_retain_until_date(until)
        .body(ByteStream::from(pseudo_random(20 << 20, 6)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::harness::status(&err), Some(412), "{err:?}");
    let got = c
        .get_object()
        .bucket(BUCKET)
        .key("large")
        .send()
        .await
        .unwrap();
    assert!(
        got.body.collect().await.unwrap().into_bytes().to_vec() == pseudo_random(20 << 20, 5),
        "the object stays as it was"
    );
    gw.shutdown().await;
}

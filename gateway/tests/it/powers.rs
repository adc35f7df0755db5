//! Client powers (issue 23 item 2): request fields that act with the gateway's upstream
//! identity (bypassing governance retention, setting retention or legal holds, ACLs and
//! grants, website redirects, SSE-C) and fields stored in the clear (tags,
//! Content-Disposition) never reach the upstream unless the client's credential was given
//! that power by name. A recording wrapper around the real s3s-fs store sees what arrives.

#![allow(clippy::wildcard_imports, reason = "the S3 DTO namespace")]

use std::sync::{Arc, Mutex};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    Delete, ObjectCannedAcl, ObjectIdentifier, ObjectLockLegalHold, ObjectLockLegalHoldStatus,
    ObjectLockRetention, ObjectLockRetentionMode,
};
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result};

use crate::harness::{AK, BUCKET, SK, Upstream, client, gateway_config, status};

/// Forwards to s3s-fs and records every field of a client's power that arrives.
struct RecordingUpstream {
    inner: s3s_fs::FileSystem,
    arrived: Arc<Mutex<Vec<String>>>,
}

impl RecordingUpstream {
    fn saw(&self, what: &str) {
        self.arrived.lock().unwrap().push(what.to_string());
    }
}

/// Records the power fields of a PUT-like input.
macro_rules! record_object_fields {
    ($self:ident, $op:literal, $input:expr) => {{
        let i = &$input;
        for (field, set) in [
            ("acl", i.acl.is_some()),
            (
                "grant",
                i.grant_read.is_some() || i.grant_full_control.is_some(),
            ),
            ("website-redirect", i.website_redirect_location.is_some()),
            ("tagging", i.tagging.is_some()),
            ("content-disposition", i.content_disposition.is_some()),
            ("sse-c", i.sse_customer_algorithm.is_some()),
        ] {
            if set {
                $self.saw(&format!("{} {field}", $op));
            }
        }
    }};
}

#[async_trait::async_trait]
impl S3 for RecordingUpstream {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let i = &req.input;
        if i.acl.is_some() {
            self.saw("CreateBucket acl");
        }
        if i.grant_read.is_some() || i.grant_write.is_some() || i.grant_full_control.is_some() {
            self.saw("CreateBucket grant");
        }
        self.inner.create_bucket(req).await
    }
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        record_object_fields!(self, "PutObject", req.input);
        self.inner.put_object(req).await
    }
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        record_object_fields!(self, "CreateMultipartUpload", req.input);
        self.inner.create_multipart_upload(req).await
    }
    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        record_object_fields!(self, "CopyObject", req.input);
        self.inner.copy_object(req).await
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
    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        if req.input.bypass_governance_retention.is_some() {
            self.saw("DeleteObject bypass-governance-retention");
        }
        self.inner.delete_object(req).await
    }
    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        if req.input.bypass_governance_retention.is_some() {
            self.saw("DeleteObjects bypass-governance-retention");
        }
        self.inner.delete_objects(req).await
    }
    async fn put_object_retention(
        &self,
        _req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        self.saw("PutObjectRetention");
        Ok(S3Response::new(PutObjectRetentionOutput::default()))
    }
    async fn put_object_legal_hold(
        &self,
        _req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        self.saw("PutObjectLegalHold");
        Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
    }
    async fn put_bucket_versioning(
        &self,
        _req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        self.saw("PutBucketVersioning");
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }
    async fn put_object_tagging(
        &self,
        _req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        self.saw("PutObjectTagging");
        Ok(S3Response::new(PutObjectTaggingOutput::default()))
    }
    async fn delete_object_tagging(
        &self,
        _req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        self.saw("DeleteObjectTagging");
        Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
    }
    async fn get_object_tagging(
        &self,
        _req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        self.saw("GetObjectTagging");
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: Vec::new(),
            ..Default::default()
        }))
    }
    async fn get_object_acl(
        &self,
        _req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        self.saw("GetObjectAcl");
        Ok(S3Response::new(GetObjectAclOutput::default()))
    }
}

/// A gateway in front of a recording s3s-fs, with `powers` given to [`AK`]; the client,
/// what arrived, and the running gateway (dropped: stopped).
async fn gateway_with(
    powers: &[&str],
) -> (
    aws_sdk_s3::Client,
    Arc<Mutex<Vec<String>>>,
    kura_gateway::server::Running,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let arrived = Arc::new(Mutex::new(Vec::new()));
    let store = RecordingUpstream {
        inner: s3s_fs::FileSystem::new(dir.path()).unwrap(),
        arrived: arrived.clone(),
    };
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    // The config's upstream address is unused: the recording store is handed in directly.
    let placeholder = Upstream::s3s_fs().await;
    let mut config = gateway_config(&placeholder, keyring);
    config.credentials[0].powers = kura_gateway::powers::Powers::parse(powers).unwrap();
    let gw = kura_gateway::server::start_with_upstream(
        config,
        kura_gateway::upstream::Upstream::from_s3(Arc::new(store)),
    )
    .await
    .unwrap();
    let c = client(gw.addr, AK, SK);
    c.create_bucket().bucket(BUCKET).send().await.unwrap();
    c.put_object()
        .bucket(BUCKET)
        .key("plain")
        .body(ByteStream::from_static(b"data"))
        .send()
        .await
        .unwrap();
    (c, arrived, gw, dir)
}

/// The HTTP status of an SDK call: 200 when it went through.
fn answer<T, E>(
    r: Result<T, aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>>,
) -> u16 {
    r.err().map_or(200, |e| status(&e).unwrap_or(0))
}

/// Every request that uses a power over objects' contents and names, each with its HTTP
/// status.
async fn use_every_power(c: &aws_sdk_s3::Client) -> Vec<(&'static str, u16)> {
    let put = || {
        c.put_object()
            .bucket(BUCKET)
            .key("k")
            .body(ByteStream::from_static(b"x"))
    };
    let all_users = "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"";
    let public = || ObjectCannedAcl::PublicRead;
    vec![
        ("acl", answer(put().acl(public()).send().await)),
        ("grant", answer(put().grant_read(all_users).send().await)),
        (
            "website-redirect",
            answer(put().website_redirect_location("/elsewhere").send().await),
        ),
        (
            "tagging",
            answer(put().tagging("project=name").send().await),
        ),
        (
            "content-disposition",
            answer(
                put()
                    .content_disposition("attachment; filename=\"payroll.xlsx\"")
                    .send()
                    .await,
            ),
        ),
        (
            "multipart acl",
            answer(
                c.create_multipart_upload()
                    .bucket(BUCKET)
                    .key("m")
                    .acl(public())
                    .send()
                    .await,
            ),
        ),
        // Before, these two reached the upstream: a bucket created public, or writable
        // by anyone, with the gateway's identity.
        (
            "bucket acl",
            answer(
                c.create_bucket()
                    .bucket("made-public")
                    .acl(aws_sdk_s3::types::BucketCannedAcl::PublicRead)
                    .send()
                    .await,
            ),
        ),
        (
            "bucket grant",
            answer(
                c.create_bucket()
                    .bucket("made-writable")
                    .grant_write(all_users)
                    .send()
                    .await,
            ),
        ),
        (
            "copy acl",
            answer(
                c.copy_object()
                    .bucket(BUCKET)
                    .key("c")
                    .copy_source(format!("{BUCKET}/plain"))
                    .acl(public())
                    .send()
                    .await,
            ),
        ),
    ]
}

/// Every request that uses an Object Lock power, each with its HTTP status.
async fn use_every_lock_power(c: &aws_sdk_s3::Client) -> Vec<(&'static str, u16)> {
    let until = aws_sdk_s3::primitives::DateTime::from_secs(4_000_000_000);
    let retention = ObjectLockRetention::builder()
        .mode(ObjectLockRetentionMode::Governance)
        .retain_until_date(until)
        .build();
    let hold = ObjectLockLegalHold::builder()
        .status(ObjectLockLegalHoldStatus::On)
        .build();
    let plain = ObjectIdentifier::builder().key("plain").build().unwrap();
    vec![
        (
            "bypass governance",
            answer(
                c.delete_object()
                    .bucket(BUCKET)
                    .key("plain")
                    .bypass_governance_retention(true)
                    .send()
                    .await,
            ),
        ),
        (
            "bypass governance (batch)",
            answer(
                c.delete_objects()
                    .bucket(BUCKET)
                    .bypass_governance_retention(true)
                    .delete(Delete::builder().objects(plain).build().unwrap())
                    .send()
                    .await,
            ),
        ),
        (
            "retention",
            answer(
                c.put_object_retention()
                    .bucket(BUCKET)
                    .key("plain")
                    .retention(retention)
                    .send()
                    .await,
            ),
        ),
        (
            "legal hold",
            answer(
                c.put_object_legal_hold()
                    .bucket(BUCKET)
                    .key("plain")
                    .legal_hold(hold)
                    .send()
                    .await,
            ),
        ),
    ]
}

/// Before: every one of these arrived upstream, signed with the gateway's identity.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_without_powers_is_refused_each_and_nothing_of_them_reaches_the_upstream() {
    let (c, arrived, _gw, _dir) = gateway_with(&[]).await;
    let mut answers = use_every_power(&c).await;
    answers.extend(use_every_lock_power(&c).await);
    let arrived = arrived.lock().unwrap().clone();
    assert!(arrived.is_empty(), "arrived upstream: {arrived:?}");
    let passed: Vec<_> = answers.iter().filter(|(_, s)| *s != 403).collect();
    assert!(passed.is_empty(), "not refused with 403: {passed:?}");
}

/// Tags and bucket versioning, each with its HTTP status: setting or removing tags (stored
/// in the clear) and PutBucketVersioning need a power; reading tags and ACLs does not.
async fn use_tags_and_versioning(c: &aws_sdk_s3::Client) -> Vec<(&'static str, u16)> {
    use aws_sdk_s3::types::{BucketVersioningStatus, Tag, Tagging, VersioningConfiguration};
    let tagging = Tagging::builder()
        .tag_set(Tag::builder().key("project").value("name").build().unwrap())
        .build()
        .unwrap();
    let suspend = VersioningConfiguration::builder()
        .status(BucketVersioningStatus::Suspended)
        .build();
    let tag = c.put_object_tagging().bucket(BUCKET).key("plain");
    let untag = c.delete_object_tagging().bucket(BUCKET).key("plain");
    let version = c.put_bucket_versioning().bucket(BUCKET);
    vec![
        (
            "PutObjectTagging",
            answer(tag.tagging(tagging).send().await),
        ),
        ("DeleteObjectTagging", answer(untag.send().await)),
        (
            "PutBucketVersioning",
            answer(version.versioning_configuration(suspend).send().await),
        ),
        (
            "GetObjectTagging",
            answer(
                c.get_object_tagging()
                    .bucket(BUCKET)
                    .key("plain")
                    .send()
                    .await,
            ),
        ),
        (
            "GetObjectAcl",
            answer(c.get_object_acl().bucket(BUCKET).key("plain").send().await),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn tags_and_bucket_versioning_are_set_only_with_their_powers_and_read_by_anyone() {
    let (c, arrived, _gw, _dir) = gateway_with(&[]).await;
    let answers = use_tags_and_versioning(&c).await;
    assert_eq!(
        answers,
        [
            ("PutObjectTagging", 403),
            ("DeleteObjectTagging", 403),
            ("PutBucketVersioning", 403),
            ("GetObjectTagging", 200),
            ("GetObjectAcl", 200),
        ]
    );
    assert_eq!(
        *arrived.lock().unwrap(),
        ["GetObjectTagging", "GetObjectAcl"]
    );

    let (c, arrived, _gw, _dir) = gateway_with(&["tags-in-clear", "bucket-versioning"]).await;
    let answers = use_tags_and_versioning(&c).await;
    assert!(answers.iter().all(|(_, s)| *s == 200), "{answers:?}");
    assert_eq!(arrived.lock().unwrap().len(), 5);
}

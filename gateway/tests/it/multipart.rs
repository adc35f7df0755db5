//! Multipart uploads: parallel and out of order, irregular layouts, part reads, two
//! stateless replicas, copies into parts, aborts.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};

use crate::harness::{self, BUCKET, Env, pseudo_random};

const MIB: usize = 1 << 20;

pub(crate) async fn create(client: &Client, key: &str) -> String {
    let out = client
        .create_multipart_upload()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
    out.upload_id().unwrap().to_string()
}

pub(crate) async fn upload(
    client: &Client,
    key: &str,
    id: &str,
    n: i32,
    body: Vec<u8>,
) -> CompletedPart {
    let out = client
        .upload_part()
        .bucket(BUCKET)
        .key(key)
        .upload_id(id)
        .part_number(n)
        .body(ByteStream::from(body))
        .send()
        .await
        .unwrap();
    CompletedPart::builder()
        .part_number(n)
        .e_tag(out.e_tag().unwrap())
        .build()
}

/// Completes upload `id` of `key` with `parts`, as the client sees the answer.
pub(crate) async fn try_complete(
    client: &Client,
    key: &str,
    id: &str,
    parts: Vec<CompletedPart>,
) -> Result<
    aws_sdk_s3::operation::complete_multipart_upload::CompleteMultipartUploadOutput,
    aws_sdk_s3::error::SdkError<
        aws_sdk_s3::operation::complete_multipart_upload::CompleteMultipartUploadError,
        aws_sdk_s3::config::http::HttpResponse,
    >,
> {
    let done = CompletedMultipartUpload::builder()
        .set_parts(Some(parts))
        .build();
    client
        .complete_multipart_upload()
        .bucket(BUCKET)
        .key(key)
        .upload_id(id)
        .multipart_upload(done)
        .send()
        .await
}

pub(crate) async fn complete(
    client: &Client,
    key: &str,
    id: &str,
    parts: Vec<CompletedPart>,
) -> String {
    let out = try_complete(client, key, id, parts).await.unwrap();
    out.e_tag().unwrap().to_string()
}

/// Uploads `parts` in order as one multipart upload of `key`; returns the completion ETag.
pub(crate) async fn put_in_parts(client: &Client, key: &str, parts: &[Vec<u8>]) -> String {
    let id = create(client, key).await;
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        done.push(upload(client, key, &id, i as i32 + 1, p.clone()).await);
    }
    complete(client, key, &id, done).await
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_out_of_order_parts_with_a_short_last_part() {
    let env = Env::start().await;
    let sizes = [5 * MIB, 5 * MIB, 5 * MIB, MIB + 7];
    let parts: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pseudo_random(n, i as u64 + 10))
        .collect();
    let whole = parts.concat();
    let id = create(&env.client, "mp").await;
    // Last part first, all at once, as Velero's 5 parallel uploads may.
    let mut tasks = Vec::new();
    for (i, p) in parts.iter().enumerate().rev() {
        let (c, id, p) = (env.client.clone(), id.clone(), p.clone());
        tasks.push(tokio::spawn(async move {
            upload(&c, "mp", &id, i as i32 + 1, p).await
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    done.sort_by_key(CompletedPart::part_number);
    let etag = complete(&env.client, "mp", &id, done).await;
    assert!(etag.trim_matches('"').ends_with("-4"), "{etag}");
    assert_eq!(env.get("mp").await, whole);
    let head = env.head("mp").await;
    assert_eq!(head.content_length(), Some(whole.len() as i64));
    assert_eq!(head.e_tag(), Some(etag.as_str()));
    let list = env.list().await;
    assert_eq!(list.contents()[0].size(), Some(whole.len() as i64));
    // A range across a part boundary, and a part read.
    let a = 5 * MIB - 10;
    assert_eq!(
        env.get_range("mp", &format!("bytes={a}-{}", a + 20))
            .await
            .unwrap(),
        &whole[a..=a + 20]
    );
    let p2 = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("mp")
        .part_number(2)
        .send()
        .await
        .unwrap();
    assert_eq!(p2.parts_count(), Some(4));
    assert_eq!(
        p2.body.collect().await.unwrap().into_bytes().to_vec(),
        parts[1]
    );
    let stored = std::fs::metadata(env.stored_path(BUCKET, "mp"))
        .unwrap()
        .len();
    assert_eq!(
        Some(stored),
        kura_keys::ciphertext_size(whole.len() as u64),
        "regular layout: closed-form size, no trailer"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn irregular_parts_get_a_trailer_and_exact_sizes() {
    let env = Env::start().await;
    // Parts that are not multiples of 64 KiB, and of different sizes (S3's minimum part
    // size is 5 MiB = 5,242,880 bytes).
    let parts = [
        pseudo_random(5_300_000, 1),
        pseudo_random(5_400_100, 2),
        pseudo_random(12_345, 3),
    ];
    let whole = parts.concat();
    let etag = put_in_parts(&env.client, "irr", &parts).await;
    let list = env.list().await;
    assert_eq!(
        list.contents()[0].size(),
        Some(whole.len() as i64),
        "listing size of an irregular object"
    );
    let head = env.head("irr").await;
    assert_eq!(head.content_length(), Some(whole.len() as i64));
    assert_eq!(
        head.e_tag(),
        Some(etag.as_str()),
        "Complete and HEAD agree on the ETag"
    );
    assert_eq!(env.get("irr").await, whole);
    let a = 5_299_990;
    assert_eq!(
        env.get_range("irr", &format!("bytes={a}-{}", a + 5_400_200))
            .await
            .unwrap(),
        &whole[a..=a + 5_400_200]
    );
    let p2 = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("irr")
        .part_number(2)
        .send()
        .await
        .unwrap();
    assert_eq!(
        p2.body.collect().await.unwrap().into_bytes().to_vec(),
        parts[1]
    );
    // Regression: a HEAD by part number answered 200 with the part's length and no
    // Content-Range, from which clients (boto3 callers, transfer managers) read the size.
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("irr")
        .part_number(2)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(parts[1].len() as i64));
    assert_eq!(
        head.content_range(),
        Some(format!("bytes 5300000-10700099/{}", whole.len()).as_str())
    );
    assert_eq!(head.parts_count(), Some(3));
}

/// Two gateway processes sharing a key file and an upstream serve one upload, part by
/// part, alternately: nothing lives in either of them.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_serve_one_upload_alternately() {
    let env = Env::start().await;
    let (other, b) = env.replica().await;
    let parts = [
        pseudo_random(5 * MIB, 1),
        pseudo_random(5 * MIB, 2),
        pseudo_random(3 * MIB, 3),
    ];
    let id = create(&env.client, "rep").await;
    let p1 = upload(&b, "rep", &id, 1, parts[0].clone()).await;
    let p2 = upload(&env.client, "rep", &id, 2, parts[1].clone()).await;
    let p3 = upload(&b, "rep", &id, 3, parts[2].clone()).await;
    complete(&b, "rep", &id, vec![p1, p2, p3]).await;
    assert_eq!(env.get("rep").await, parts.concat());
    let via_b = b
        .get_object()
        .bucket(BUCKET)
        .key("rep")
        .range("bytes=5242870-5242890")
        .send()
        .await
        .unwrap();
    assert_eq!(
        via_b.body.collect().await.unwrap().into_bytes().to_vec(),
        &parts.concat()[5_242_870..=5_242_890]
    );
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_ids_are_bound_to_their_object() {
    let env = Env::start().await;
    let id = create(&env.client, "one").await;
    let err = env
        .client
        .upload_part()
        .bucket(BUCKET)
        .key("two")
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(harness::code(&err).as_deref(), Some("NoSuchUpload"));
    let forged = format!("{}.{}", id.rsplit_once('.').unwrap().0, "A".repeat(219));
    let err = env
        .client
        .upload_part()
        .bucket(BUCKET)
        .key("one")
        .upload_id(&forged)
        .part_number(1)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(harness::code(&err).as_deref(), Some("NoSuchUpload"));
    env.client
        .abort_multipart_upload()
        .bucket(BUCKET)
        .key("one")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn list_parts_reports_plaintext_sizes() {
    let env = Env::start().await;
    let id = create(&env.client, "lp").await;
    upload(&env.client, "lp", &id, 1, pseudo_random(5 * MIB, 1)).await;
    upload(&env.client, "lp", &id, 2, pseudo_random(1234, 2)).await;
    let parts = env
        .client
        .list_parts()
        .bucket(BUCKET)
        .key("lp")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    let sizes: Vec<i64> = parts
        .parts()
        .iter()
        .filter_map(aws_sdk_s3::types::Part::size)
        .collect();
    assert_eq!(sizes, vec![5 * MIB as i64, 1234]);
    env.client
        .abort_multipart_upload()
        .bucket(BUCKET)
        .key("lp")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_part_copy_reencrypts_a_source_range() {
    let env = Env::start().await;
    let src = pseudo_random(6 * MIB + 5, 9);
    env.put("src", &src).await;
    let id = create(&env.client, "dst").await;
    let p1 = env
        .client
        .upload_part_copy()
        .bucket(BUCKET)
        .key("dst")
        .upload_id(&id)
        .part_number(1)
        .copy_source(format!("{BUCKET}/src"))
        .copy_source_range(format!("bytes=0-{}", 5 * MIB - 1))
        .send()
        .await
        .unwrap();
    let p1 = CompletedPart::builder()
        .part_number(1)
        .e_tag(p1.copy_part_result().unwrap().e_tag().unwrap())
        .build();
    let p2 = upload(&env.client, "dst", &id, 2, pseudo_random(100, 1)).await;
    complete(&env.client, "dst", &id, vec![p1, p2]).await;
    let mut want = src[..5 * MIB].to_vec();
    want.extend_from_slice(&pseudo_random(100, 1));
    assert_eq!(env.get("dst").await, want);
}

/// s3cmd compares a part's ETag with the MD5 of the plaintext part it sent unless the ETag
/// has a `-`; the ciphertext MD5 made it retry every part and give up.
#[tokio::test]
async fn part_etags_do_not_look_like_md5s_and_completion_maps_them_back() {
    let env = Env::start().await;
    let id = create(&env.client, "s3cmd").await;
    let (a, b) = (pseudo_random(5 * MIB, 1), pseudo_random(1000, 2));
    let p1 = upload(&env.client, "s3cmd", &id, 1, a.clone()).await;
    let p2 = upload(&env.client, "s3cmd", &id, 2, b.clone()).await;
    for p in [&p1, &p2] {
        let etag = p.e_tag().unwrap().trim_matches('"');
        assert!(etag.ends_with("-0") && etag.len() == 34, "{etag}");
    }
    // ListParts maps ETags the same way; s3s-fs lists parts without ETags, so that
    // half is not observable here.
    complete(&env.client, "s3cmd", &id, vec![p1, p2]).await;
    assert_eq!(env.get("s3cmd").await, [a, b].concat());
}

#[tokio::test(flavor = "multi_thread")]
async fn copy_of_an_irregular_object_reads_back_whole_and_by_range() {
    let env = Env::start().await;
    let parts = [
        pseudo_random(5_300_000, 4),
        pseudo_random(5_400_100, 5),
        pseudo_random(12_345, 6),
    ];
    let whole = parts.concat();
    put_in_parts(&env.client, "irr", &parts).await;
    // Above 8 MiB stored, so the trailer travels in the server-side part of the copy.
    env.client
        .copy_object()
        .bucket(BUCKET)
        .key("irr-copy")
        .copy_source(format!("{BUCKET}/irr"))
        .send()
        .await
        .unwrap();
    assert!(env.get("irr-copy").await == whole);
    let a = 5_299_990;
    assert!(
        env.get_range("irr-copy", &format!("bytes={a}-{}", a + 20))
            .await
            .unwrap()
            == whole[a..=a + 20]
    );
    let head = env.head("irr-copy").await;
    assert_eq!(head.content_length(), Some(whole.len() as i64));
}

/// `x-amz-mp-object-size` (the total a client expects) is checked against the plaintext
/// of the parts chosen: a completion that leaves a part out is refused, and nothing is
/// stored. (It was dropped unchecked; s3s-fs does not check it either.)
#[tokio::test(flavor = "multi_thread")]
async fn a_completion_whose_expected_size_differs_is_refused() {
    let env = Env::start().await;
    let parts = [
        pseudo_random(5 * MIB, 1),
        pseudo_random(5 * MIB, 2),
        pseudo_random(1000, 3),
    ];
    let id = create(&env.client, "sized").await;
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        done.push(upload(&env.client, "sized", &id, i as i32 + 1, p.clone()).await);
    }
    let complete_with = |parts: Vec<CompletedPart>, size: i64| {
        env.client
            .complete_multipart_upload()
            .bucket(BUCKET)
            .key("sized")
            .upload_id(&id)
            .mpu_object_size(size)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
    };
    let total = (10 * MIB + 1000) as i64;
    let err = complete_with(done[..2].to_vec(), total).await.unwrap_err();
    assert_eq!(crate::harness::status(&err), Some(400));
    assert_eq!(
        crate::harness::code(&err).as_deref(),
        Some("InvalidRequest")
    );
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("sized")
        .send()
        .await;
    assert!(head.is_err(), "nothing is stored");
    complete_with(done, total).await.unwrap();
    assert_eq!(env.head("sized").await.content_length, Some(total));
}

/// A part uploaded twice with the same bytes: the completion that names the second
/// upload's ETag (what a retrying client sends) works. One that names the first upload's
/// is 400 InvalidPart on an upstream that lists part ETags (S3 would accept it;
/// gateway/README.md, "Multipart without state", says why); s3s-fs lists none, and the
/// stored part is completed. Either way the object reads back as the part's bytes.
#[tokio::test(flavor = "multi_thread")]
async fn a_part_uploaded_twice_completes_with_the_etag_of_the_upload_stored() {
    let env = Env::start().await;
    let body = pseudo_random(5 * MIB, 11);
    for (key, which) in [("second", 1), ("first", 0)] {
        let id = create(&env.client, key).await;
        let uploads = [
            upload(&env.client, key, &id, 1, body.clone()).await,
            upload(&env.client, key, &id, 1, body.clone()).await,
        ];
        assert_ne!(
            uploads[0].e_tag(),
            uploads[1].e_tag(),
            "each upload sealed anew"
        );
        let named = uploads[which].clone();
        match (
            which,
            try_complete(&env.client, key, &id, vec![named]).await,
        ) {
            (_, Ok(_)) => {}
            (0, Err(err)) => {
                assert_eq!(
                    harness::code(&err).as_deref(),
                    Some("InvalidPart"),
                    "{err:?}"
                );
                let last = uploads[1].clone();
                try_complete(&env.client, key, &id, vec![last])
                    .await
                    .unwrap();
            }
            (_, Err(err)) => panic!("completion with the stored part's ETag: {err:?}"),
        }
        assert_eq!(env.get(key).await, body);
    }
}

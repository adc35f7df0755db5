//! Nothing lost, nothing forged: the upstream holds no plaintext, a tampered object at rest
//! never yields its bytes, and a body that is not what the client declared is not stored.

use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;

use crate::harness::{BUCKET, Env, code, files_under, pseudo_random, status};

const MARKER: &[u8] = b"KURA-PLAINTEXT-MARKER-0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn upstream_directory_holds_no_plaintext() {
    let env = Env::start().await;
    let body: Vec<u8> = MARKER.iter().copied().cycle().take(300_000).collect();
    env.put("plain/one", &body).await;
    env.put("plain/two", MARKER).await;
    let up = env
        .client
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("plain/mp")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = env
        .client
        .upload_part()
        .bucket(BUCKET)
        .key("plain/mp")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    let done = aws_sdk_s3::types::CompletedMultipartUpload::builder()
        .parts(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(1)
                .e_tag(part.e_tag().unwrap())
                .build(),
        )
        .build();
    env.client
        .complete_multipart_upload()
        .bucket(BUCKET)
        .key("plain/mp")
        .upload_id(id)
        .multipart_upload(done)
        .send()
        .await
        .unwrap();
    let mut scanned = 0;
    for f in files_under(env.upstream.dir.path()) {
        let bytes = std::fs::read(&f).unwrap();
        scanned += bytes.len();
        assert!(
            !bytes.windows(16).any(|w| w == &MARKER[..16]),
            "plaintext found in {}",
            f.display()
        );
    }
    assert!(
        scanned > 600_000,
        "the scan must have seen the stored objects ({scanned} bytes)"
    );
    assert_eq!(env.get("plain/mp").await, body);
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_segment_at_rest_fails_the_read() {
    let env = Env::start().await;
    let body = pseudo_random(4 * 65_536, 5);
    env.put("t", &body).await;
    let path = env.stored_path(BUCKET, "t");
    let mut stored = std::fs::read(&path).unwrap();
    let at = 164 + 2 * 65_568 + 1000;
    stored[at] ^= 0x40;
    std::fs::write(&path, &stored).unwrap();
    // Whole read: the response breaks off; what arrived is only authentic segments.
    let out = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("t")
        .send()
        .await
        .unwrap();
    if let Ok(b) = out.body.collect().await {
        panic!(
            "a tampered object was returned whole ({} bytes)",
            b.into_bytes().len()
        );
    }
    // A range inside the tampered segment fails, and so does one that covers it whole
    // (opened straight from the input); one before it still reads.
    assert!(env.get_range("t", "bytes=140000-140010").await.is_err());
    assert!(env.get_range("t", "bytes=100000-200000").await.is_err());
    assert_eq!(
        env.get_range("t", "bytes=0-99").await.unwrap(),
        &body[..100]
    );
}

/// A whole read of an object with a trailer whose body a bucket writer rearranged (part 2
/// cut out, parts 3 and 4 moved up into its place, filler before the trailer so that the
/// length holds) stops where part 2 should begin: the gateway read the trailer's parts
/// table for the size, and the walk is held to it. Each moved part is authentic, so a walk
/// that only compared the table at the end served part 3's plaintext at part 2's offsets.
#[tokio::test(flavor = "multi_thread")]
async fn parts_moved_at_rest_are_not_served_in_the_wrong_place() {
    let env = Env::start().await;
    let parts = [
        pseudo_random(5_300_000, 41),
        pseudo_random(5_300_000, 42),
        pseudo_random(5_300_000, 43),
        pseudo_random(100, 44),
    ];
    crate::multipart::put_in_parts(&env.client, "moved", &parts).await;
    let path = env.stored_path(BUCKET, "moved");
    let stored = std::fs::read(&path).unwrap();
    // Stored per part: its bytes, and 32 more per 64 KiB segment (SPEC 5.1); the header
    // (164 bytes) before part 1.
    let sealed = |p: &Vec<u8>| p.len() + 32 * p.len().div_ceil(65_536).max(1);
    let second_at = 164 + sealed(&parts[0]);
    let third_at = second_at + sealed(&parts[1]);
    let trailer = third_at + sealed(&parts[2]) + sealed(&parts[3]);
    let mut forged = stored[..second_at].to_vec();
    forged.extend_from_slice(&stored[third_at..trailer]);
    forged.resize(trailer, 0);
    forged.extend_from_slice(&stored[trailer..]);
    assert_eq!(forged.len(), stored.len());
    std::fs::write(&path, &forged).unwrap();
    let mut body = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("moved")
        .send()
        .await
        .unwrap()
        .body;
    let mut got = 0;
    loop {
        match body.try_next().await {
            Ok(Some(b)) => got += b.len(),
            Ok(None) => panic!("a rearranged object was served whole"),
            Err(_) => break,
        }
    }
    assert!(
        got <= parts[0].len(),
        "{got} bytes went out; only part 1's {} are where they belong",
        parts[0].len()
    );
}

/// A bucket writer who kept the ciphertext of a part the client uploaded twice puts the
/// earlier upload back, when it had another length (SPEC 5.2, issue 23 item 5c). The body
/// has no trailer (the layout the client completed is regular), its part numbers run 1, 2,
/// 3 and every segment is authentic, so a walk that checked only the numbers served the
/// earlier upload's bytes as a complete object; part 2 is not `P` bytes long.
#[tokio::test(flavor = "multi_thread")]
async fn an_earlier_upload_of_a_part_with_another_length_put_back_is_not_served() {
    use crate::multipart::{complete, create, upload};
    let env = Env::start().await;
    let parts = [
        pseudo_random(5 << 20, 51),
        pseudo_random(5 << 20, 52),
        pseudo_random(100, 53),
    ];
    let id = create(&env.client, "twice").await;
    let mut done = vec![upload(&env.client, "twice", &id, 1, parts[0].clone()).await];
    // The first upload of part 2: two segments, kept by whoever can read the upstream.
    upload(&env.client, "twice", &id, 2, pseudo_random(2 * 65_536, 54)).await;
    let root = env.stored_path(BUCKET, "x");
    let root = root.parent().unwrap().parent().unwrap();
    let earlier = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".part-2"))
        .map(std::fs::read)
        .expect("the upstream keeps the part in a file")
        .unwrap();
    done.push(upload(&env.client, "twice", &id, 2, parts[1].clone()).await);
    done.push(upload(&env.client, "twice", &id, 3, parts[2].clone()).await);
    complete(&env.client, "twice", &id, done).await;
    assert_eq!(env.get("twice").await, parts.concat());

    let path = env.stored_path(BUCKET, "twice");
    let stored = std::fs::read(&path).unwrap();
    let sealed = |n: usize| n + 32 * n.div_ceil(65_536).max(1);
    let second_at = 164 + sealed(parts[0].len());
    let third_at = second_at + sealed(parts[1].len());
    let mut forged = stored[..second_at].to_vec();
    forged.extend_from_slice(&earlier);
    forged.extend_from_slice(&stored[third_at..]);
    std::fs::write(&path, &forged).unwrap();
    if let Ok(out) = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("twice")
        .send()
        .await
    {
        let r = out.body.collect().await;
        assert!(
            r.is_err(),
            "a body with an earlier upload of part 2 put back was served as complete ({} bytes)",
            r.map_or(0, |b| b.into_bytes().len())
        );
    }
}

/// A 500, which S3 clients retry; marked as an error that repeats, so that kura's
/// repository does not.
#[tokio::test(flavor = "multi_thread")]
async fn tampered_header_at_rest_is_an_error_response_marked_permanent() {
    let env = Env::start().await;
    env.put("h", &pseudo_random(1000, 1)).await;
    let path = env.stored_path(BUCKET, "h");
    let mut stored = std::fs::read(&path).unwrap();
    stored[40] ^= 1;
    std::fs::write(&path, &stored).unwrap();
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("h")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(500));
    let marked = err
        .raw_response()
        .and_then(|r| r.headers().get(kura_gateway::error::PERMANENT_ERROR_HEADER));
    assert_eq!(marked, Some("permanent"));
}

#[tokio::test(flavor = "multi_thread")]
async fn object_moved_upstream_does_not_open_under_its_new_name() {
    let env = Env::start().await;
    env.put("original", &pseudo_random(1000, 2)).await;
    std::fs::copy(
        env.stored_path(BUCKET, "original"),
        env.stored_path(BUCKET, "moved"),
    )
    .unwrap();
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("moved")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(500));
}

#[tokio::test(flavor = "multi_thread")]
async fn content_md5_mismatch_is_bad_digest_and_stores_nothing() {
    let env = Env::start().await;
    let err = env
        .client
        .put_object()
        .bucket(BUCKET)
        .key("md5")
        .content_md5("1B2M2Y8AsgTpgAmY7PhCfg==") // MD5 of the empty string
        .body(ByteStream::from_static(b"not empty"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("BadDigest"));
    let err = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("md5")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        status(&err),
        Some(404),
        "nothing may be stored after BadDigest"
    );
    // The right MD5 is accepted.
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("md5")
        .content_md5("1B2M2Y8AsgTpgAmY7PhCfg==")
        .body(ByteStream::from_static(b""))
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_checksum_is_bad_digest_and_stores_nothing() {
    let env = Env::start().await;
    let err = env
        .client
        .put_object()
        .bucket(BUCKET)
        .key("crc")
        .checksum_crc32("AAAAAA==")
        .body(ByteStream::from_static(b"some bytes"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err).as_deref(), Some("BadDigest"));
    env.assert_absent("crc", "a bad checksum stores nothing")
        .await;
}

/// The SDK's default checksum mode sends aws-chunked bodies with a CRC32 trailer; the
/// framing must not be stored and the trailer must be checked.
#[tokio::test(flavor = "multi_thread")]
async fn chunked_trailer_upload_stores_only_the_payload() {
    let env = Env::start().await;
    let body = pseudo_random(300_001, 8);
    let out = env
        .client
        .put_object()
        .bucket(BUCKET)
        .key("chunked")
        .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32)
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    assert!(out.checksum_crc32().is_some());
    assert_eq!(env.get("chunked").await, body);
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("chunked")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(300_001));
    assert_eq!(
        head.content_encoding(),
        None,
        "aws-chunked is framing, never stored"
    );
}

/// Regression: a body cut at a segment boundary has a stored size that maps to a smaller,
/// valid plaintext size; hyper stopped polling at Content-Length before the opener could
/// notice the missing final segment, so the GET answered a clean, short 200.
#[tokio::test(flavor = "multi_thread")]
async fn body_cut_at_a_segment_boundary_is_not_served_as_complete() {
    let env = Env::start().await;
    env.put("cut", &pseudo_random(3 * 65_536 + 500, 4)).await;
    let path = env.stored_path(BUCKET, "cut");
    let stored = std::fs::read(&path).unwrap();
    std::fs::write(&path, &stored[..164 + 2 * 65_568]).unwrap();
    match env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("cut")
        .send()
        .await
    {
        Err(_) => {}
        Ok(out) => {
            let r = out.body.collect().await;
            assert!(
                r.is_err(),
                "a truncated object was served as complete ({} bytes)",
                r.map_or(0, |b| b.into_bytes().len())
            );
        }
    }
    // An empty object cut to its header is an error too.
    env.put("empty", b"").await;
    let path = env.stored_path(BUCKET, "empty");
    let stored = std::fs::read(&path).unwrap();
    std::fs::write(&path, &stored[..164]).unwrap();
    let r = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("empty")
        .send()
        .await;
    assert!(
        r.is_err(),
        "an empty object without its final segment must not read as empty"
    );
}

/// Another replica's cached layout must not outlive the object it describes.
#[tokio::test(flavor = "multi_thread")]
async fn sizes_follow_an_overwrite_made_through_another_replica() {
    let env = Env::start().await;
    let (other, b) = env.replica().await;
    // Parts of `sizes` bytes, part i filled from seed i.
    let client = &env.client;
    let upload = |sizes: &[usize]| {
        let parts: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| pseudo_random(*n, i as u64))
            .collect();
        async move { crate::multipart::put_in_parts(client, "x", &parts).await }
    };
    upload(&[5_300_000, 7]).await;
    let first = b
        .head_object()
        .bucket(BUCKET)
        .key("x")
        .send()
        .await
        .unwrap();
    assert_eq!(first.content_length(), Some(5_300_007));
    upload(&[5_400_000, 5_300_001, 9]).await;
    let second = b
        .head_object()
        .bucket(BUCKET)
        .key("x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        second.content_length(),
        Some(10_700_010),
        "a stale cached layout was used"
    );
    let listed = b.list_objects_v2().bucket(BUCKET).send().await.unwrap();
    assert_eq!(listed.contents()[0].size(), Some(10_700_010));
    other.shutdown().await;
}

/// Regression: a range read's conditions were checked against the header cached before
/// another replica replaced the object, so a client that read the new ETag with HEAD and
/// sent it as If-Match (as aws-cli and the Go SDK do) got 412 on every retry; so did a
/// part copy from that object.
#[tokio::test(flavor = "multi_thread")]
async fn conditions_hold_against_an_object_replaced_through_another_replica() {
    let env = Env::start().await;
    let (_other, b) = env.replica().await;
    let (old, new) = (pseudo_random(100_000, 1), pseudo_random(120_000, 2));
    crate::harness::put(&env.client, "x", &old).await;
    // This replica caches the old object's header.
    let ranged = |if_match: String| {
        env.client
            .get_object()
            .bucket(BUCKET)
            .key("x")
            .range("bytes=10-99")
            .if_match(if_match)
            .send()
    };
    let old_etag = env.head("x").await.e_tag.unwrap();
    ranged(old_etag).await.unwrap();
    crate::harness::put(&b, "x", &new).await;

    let new_etag = env.head("x").await.e_tag.unwrap();
    let got = ranged(new_etag.clone()).await.unwrap();
    assert_eq!(got.content_range(), Some("bytes 10-99/120000"));
    let got = got.body.collect().await.unwrap().into_bytes();
    assert!(got == new[10..100]);

    // A part copy whose source condition names the new ETag.
    crate::harness::put(&env.client, "y", &old).await;
    let copy_range = |client: &aws_sdk_s3::Client| {
        client
            .get_object()
            .bucket(BUCKET)
            .key("y")
            .range("bytes=0-9")
            .send()
    };
    copy_range(&env.client).await.unwrap();
    crate::harness::put(&b, "y", &new).await;
    let new_y = env.head("y").await.e_tag.unwrap();
    let id = env
        .client
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("z")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let part = env
        .client
        .upload_part_copy()
        .bucket(BUCKET)
        .key("z")
        .upload_id(&id)
        .part_number(1)
        .copy_source(format!("{BUCKET}/y"))
        .copy_source_if_match(new_y)
        .send()
        .await;
    assert!(part.is_ok(), "{part:?}");
}

/// Regression: only whole reads checked that the sealed metadata belongs to the body's
/// object, so an upstream that swapped in the metadata of an earlier version of the same
/// key had it returned as authentic on range reads.
#[tokio::test(flavor = "multi_thread")]
async fn range_reads_refuse_metadata_from_another_version() {
    let env = Env::start().await;
    let put = |meta: &'static str, body: Vec<u8>| {
        env.client
            .put_object()
            .bucket(BUCKET)
            .key("m")
            .metadata("v", meta)
            .body(body.into())
            .send()
    };
    let sidecar = || {
        std::fs::read_dir(&env.upstream.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                // The only object here (s3s-fs names the file after the key in base64).
                name.ends_with(".metadata.json") && !name.contains(".upload-")
            })
            .expect("s3s-fs keeps the metadata beside the object")
    };
    put("old", pseudo_random(5000, 1)).await.unwrap();
    let old_meta = std::fs::read(sidecar()).unwrap();
    put("new", pseudo_random(5000, 2)).await.unwrap();
    let range = || {
        env.client
            .get_object()
            .bucket(BUCKET)
            .key("m")
            .range("bytes=0-99")
            .send()
    };
    let fine = range().await.unwrap();
    assert_eq!(fine.metadata().unwrap()["v"], "new");
    std::fs::write(sidecar(), old_meta).unwrap();
    let err = range().await.unwrap_err();
    assert_eq!(crate::harness::status(&err), Some(500), "{err:?}");
    let whole = env.client.get_object().bucket(BUCKET).key("m").send().await;
    assert!(whole.is_err(), "whole reads refuse it too");
}

/// Rewrites `key` on the upstream: the same ciphertext, with `metadata` instead of what
/// kura stored.
async fn rewrite_metadata(env: &Env, key: &str, metadata: &[(&str, &str)]) {
    let body = stored_body(env, key).await;
    let mut put = env
        .bucket_writer()
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(body.into());
    for (k, v) in metadata {
        put = put.metadata(*k, *v);
    }
    put.send().await.unwrap();
}

/// The stored bytes of `key`, as the upstream holds them.
async fn stored_body(env: &Env, key: &str) -> bytes::Bytes {
    env.bucket_writer()
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes()
}

/// Asserts that HEAD of `key` through the gateway fails.
async fn head_fails(env: &Env, key: &str) {
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await;
    assert!(
        head.is_err(),
        "HEAD of {key} showed {:?}",
        head.map(|h| h.metadata().cloned())
    );
}

/// The stored metadata of `key`, as the upstream holds it.
async fn stored_metadata(env: &Env, key: &str) -> std::collections::HashMap<String, String> {
    let head = env
        .bucket_writer()
        .head_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
    head.metadata().cloned().unwrap_or_default()
}

/// Issue 23 item 1: someone who can write the bucket drops kura's metadata entries and
/// adds their own in the clear. Neither HEAD nor GET through kura shows their value.
#[tokio::test(flavor = "multi_thread")]
async fn metadata_rewritten_in_the_clear_on_the_upstream_is_never_shown() {
    let env = Env::start().await;
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("owned")
        .metadata("owner", "alice")
        .body(ByteStream::from_static(b"contents"))
        .send()
        .await
        .unwrap();
    rewrite_metadata(&env, "owned", &[("owner", "attacker")]).await;
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("owned")
        .send()
        .await;
    if let Ok(h) = &head {
        assert_ne!(
            h.metadata()
                .and_then(|m| m.get("owner"))
                .map(String::as_str),
            Some("attacker")
        );
    }
    assert!(
        head.is_err(),
        "HEAD of an object whose metadata was replaced"
    );
    let get = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("owned")
        .send()
        .await;
    if let Ok(g) = &get {
        assert_ne!(
            g.metadata()
                .and_then(|m| m.get("owner"))
                .map(String::as_str),
            Some("attacker")
        );
    }
    assert!(get.is_err(), "GET of an object whose metadata was replaced");
}

/// Before: HEAD opened the metadata with its own header copy and never compared that
/// copy with the body's header (SPEC 7), as GETs do. A bucket writer who saved an older
/// version's metadata and put it back beside the new body had HEAD show the old values
/// with the new body's size and ETag.
#[tokio::test(flavor = "multi_thread")]
async fn a_head_refuses_metadata_saved_from_an_older_version_of_the_object() {
    let env = Env::start().await;
    let put = |v: &'static str, seed| {
        env.client
            .put_object()
            .bucket(BUCKET)
            .key("m")
            .metadata("v", v)
            .body(pseudo_random(5000, seed).into())
            .send()
    };
    put("old", 1).await.unwrap();
    let old = stored_metadata(&env, "m").await;
    put("new", 2).await.unwrap();
    let old: Vec<(&str, &str)> = old.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    rewrite_metadata(&env, "m", &old).await;
    head_fails(&env, "m").await;
}

/// Before: a body that is kura's but does not verify under its key (here another
/// object's ciphertext, bound to that object's name) was taken for another writer's, so
/// HEAD showed the metadata a bucket writer stored in the clear beside it.
#[tokio::test(flavor = "multi_thread")]
async fn a_head_refuses_clear_metadata_beside_another_objects_kura_body() {
    let env = Env::start().await;
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("a")
        .metadata("owner", "alice")
        .body(ByteStream::from_static(b"contents"))
        .send()
        .await
        .unwrap();
    env.bucket_writer()
        .put_object()
        .bucket(BUCKET)
        .key("b")
        .metadata("owner", "attacker")
        .body(stored_body(&env, "a").await.into())
        .send()
        .await
        .unwrap();
    head_fails(&env, "b").await;
}

/// Issue 23 item 1: a copy keeps its source's data key. The sealed metadata of a copy
/// made with new metadata (REPLACE), put on its source beside the source's own header
/// copy, must not open there.
#[tokio::test(flavor = "multi_thread")]
async fn the_sealed_metadata_of_a_copy_does_not_open_on_its_source() {
    let env = Env::start().await;
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("source")
        .metadata("owner", "alice")
        .body(ByteStream::from_static(b"contents"))
        .send()
        .await
        .unwrap();
    env.client
        .copy_object()
        .bucket(BUCKET)
        .key("copy")
        .copy_source(format!("{BUCKET}/source"))
        .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
        .metadata("owner", "mallory")
        .send()
        .await
        .unwrap();
    let source = stored_metadata(&env, "source").await;
    let copy = stored_metadata(&env, "copy").await;
    rewrite_metadata(
        &env,
        "source",
        &[
            ("kura-key", &source["kura-key"]),
            ("kura-meta", &copy["kura-meta"]),
        ],
    )
    .await;
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("source")
        .send()
        .await;
    let get = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("source")
        .send()
        .await;
    for read in [
        head.map(|h| h.metadata().cloned())
            .map_err(|e| format!("{e:?}")),
        get.map(|g| g.metadata().cloned())
            .map_err(|e| format!("{e:?}")),
    ] {
        let shown = read.as_ref().ok().cloned().flatten().unwrap_or_default();
        assert_ne!(shown.get("owner").map(String::as_str), Some("mallory"));
        assert!(
            read.is_err(),
            "the copy's metadata opened on its source: {shown:?}"
        );
    }
    // The copy itself still shows its own.
    let fresh = env.head("copy").await;
    assert_eq!(fresh.metadata().unwrap()["owner"], "mallory");
}

/// An object another program wrote to the bucket keeps its metadata as stored (it has no
/// kura body), and telling that costs one read of its first bytes, not one per HEAD.
#[tokio::test(flavor = "multi_thread")]
async fn another_writers_object_shows_its_metadata_and_is_read_once_to_tell() {
    let env = Env::start().await;
    env.bucket_writer()
        .put_object()
        .bucket(BUCKET)
        .key("foreign")
        .metadata("owner", "someone-else")
        .body(ByteStream::from(pseudo_random(300_000, 5)))
        .send()
        .await
        .unwrap();
    let gets = || {
        kura_testkit::metrics::sum(
            env.gateway.addr.port(),
            "kura_upstream_requests_total{operation=\"GetObject\"}",
        )
    };
    let head = || {
        env.client
            .head_object()
            .bucket(BUCKET)
            .key("foreign")
            .send()
    };
    let first = head().await.unwrap();
    assert_eq!(first.metadata().unwrap()["owner"], "someone-else");
    let after_first = gets();
    assert!(after_first >= 1, "the body was read to tell whose it is");
    head().await.unwrap();
    head().await.unwrap();
    assert_eq!(gets(), after_first, "read again on a later HEAD");
}

/// Forwards to s3s-fs, and does what no real store does on demand: armed with the files
/// of an older version, it puts them back in place just before the next read of a header
/// (a ranged GET), as a writer going straight to the upstream between a HEAD and that read
/// would; with `archived`, it refuses every GET as S3 does for an object in Glacier.
struct InterferingUpstream {
    inner: s3s_fs::FileSystem,
    older: std::sync::Mutex<Vec<(std::path::PathBuf, Vec<u8>)>>,
    archived: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl s3s::S3 for InterferingUpstream {
    async fn create_bucket(
        &self,
        req: s3s::S3Request<s3s::dto::CreateBucketInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::CreateBucketOutput>> {
        self.inner.create_bucket(req).await
    }
    async fn put_object(
        &self,
        req: s3s::S3Request<s3s::dto::PutObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::PutObjectOutput>> {
        self.inner.put_object(req).await
    }
    async fn head_object(
        &self,
        req: s3s::S3Request<s3s::dto::HeadObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::HeadObjectOutput>> {
        self.inner.head_object(req).await
    }
    async fn get_object(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectOutput>> {
        if self.archived.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(s3s::s3_error!(
                InvalidObjectState,
                "The operation is not valid for the object's storage class"
            ));
        }
        if req.input.range.is_some() {
            for (path, bytes) in std::mem::take(&mut *self.older.lock().unwrap()) {
                std::fs::write(path, bytes).unwrap();
            }
        }
        self.inner.get_object(req).await
    }
}

/// A gateway in front of an [`InterferingUpstream`] in `dir`, and a client of it without
/// the SDK's retries (a HEAD must not need a client that asks again).
async fn interfered_with(
    dir: &std::path::Path,
) -> (
    Arc<InterferingUpstream>,
    kura_gateway::server::Running,
    aws_sdk_s3::Client,
) {
    let store = Arc::new(InterferingUpstream {
        inner: s3s_fs::FileSystem::new(dir).unwrap(),
        older: std::sync::Mutex::new(Vec::new()),
        archived: std::sync::atomic::AtomicBool::new(false),
    });
    let keyring = Arc::new(kura_keys::Keyring::generate("t".into()).unwrap());
    // The config's upstream address is unused: the store is handed in directly.
    let placeholder = crate::harness::Upstream::s3s_fs().await;
    let gw = kura_gateway::server::start_with_upstream(
        crate::harness::gateway_config(&placeholder, keyring),
        kura_gateway::upstream::Upstream::from_s3(store.clone()),
    )
    .await
    .unwrap();
    let c = crate::harness::client(gw.addr, crate::harness::AK, crate::harness::SK);
    let c = aws_sdk_s3::Client::from_conf(
        c.config()
            .to_builder()
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
            .build(),
    );
    c.create_bucket().bucket(BUCKET).send().await.unwrap();
    (store, gw, c)
}

/// PUT `m` through `c` with metadata `v` and a body from `seed`.
async fn put_m(c: &aws_sdk_s3::Client, v: &str, seed: u64) {
    c.put_object()
        .bucket(BUCKET)
        .key("m")
        .metadata("v", v)
        .body(pseudo_random(5000, seed).into())
        .send()
        .await
        .unwrap();
}

/// Before: once HEAD read the body's header to check the metadata against it, an object
/// replaced between the upstream HEAD and that read failed the HEAD: 412 from a store that
/// honours If-Match (the embedded one; a backup's session object, rewritten every few
/// seconds, failed a backup in CI this way), and a tampered-header 500 from one that
/// ignores it (s3s-fs). The HEAD now asks again, and answers for the object it finds.
#[tokio::test(flavor = "multi_thread")]
async fn a_head_of_an_object_replaced_while_it_is_read_answers_for_one_version() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _gw, c) = interfered_with(dir.path()).await;
    put_m(&c, "old", 1).await;
    let older: Vec<_> = files_under(dir.path())
        .iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    put_m(&c, "new", 2).await;
    *store.older.lock().unwrap() = older;
    let head = c.head_object().bucket(BUCKET).key("m").send().await;
    let head = head.unwrap_or_else(|e| panic!("{:?}: {e:?}", status(&e)));
    assert_eq!(head.metadata().unwrap()["v"], "old");
    assert_eq!(head.content_length(), Some(5000));
}

/// Before: once HEAD read the body's header, the HEAD of an object in an archive storage
/// class (every GET refused until it is restored) failed, though its HEAD is how a client
/// learns that. Its metadata opens with the header copy alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_head_of_an_archived_object_answers_with_its_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _gw, c) = interfered_with(dir.path()).await;
    put_m(&c, "kept", 3).await;
    store
        .archived
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let head = c.head_object().bucket(BUCKET).key("m").send().await;
    let head = head.unwrap_or_else(|e| panic!("{:?}: {e:?}", status(&e)));
    assert_eq!(head.metadata().unwrap()["v"], "kept");
    assert_eq!(head.content_length(), Some(5000));
    let get = c.get_object().bucket(BUCKET).key("m").send().await;
    assert_eq!(status(&get.unwrap_err()), Some(403), "GETs are refused");
}

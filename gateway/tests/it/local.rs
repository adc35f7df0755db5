//! The embedded default's store (`LocalDir`), through a gateway on loopback: answers where
//! plain s3s-fs differs from S3.

use std::sync::Arc;

use kura_gateway::config::UpstreamConfig;
use kura_gateway::server::Running;
use kura_keys::Keyring;

use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};

use crate::harness::{AK, BUCKET, SK, Upstream, client, gateway_config, pseudo_random, status};
use crate::multipart::try_complete;

/// rclone HEADs `tree` before copying into `tree/`; s3s-fs answered 500 (reading the
/// directory as a file) and every retry of the gateway and rclone followed.
/// A gateway in front of a `LocalDir` on a temporary directory, its bucket created.
async fn local_gateway() -> (tempfile::TempDir, Running, aws_sdk_s3::Client) {
    let dir = tempfile::tempdir().unwrap();
    let keyring = Arc::new(Keyring::generate("test".into()).unwrap());
    // The S3 settings are replaced by the local store; the rest is the usual test config.
    let unused = Upstream::s3s_fs().await;
    let mut config = gateway_config(&unused, keyring);
    config.upstream = UpstreamConfig::Local {
        dir: dir.path().to_path_buf(),
    };
    let gateway = kura_gateway::server::start(config).await.unwrap();
    let s3 = client(gateway.addr, AK, SK);
    s3.create_bucket().bucket(BUCKET).send().await.unwrap();
    (dir, gateway, s3)
}

/// Files in the store's root other than bucket directories: s3s-fs's sidecars, and any
/// temporary file left behind.
fn root_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// PutObject is written by `upstream/local/put.rs` in s3s-fs's layout: s3s-fs then serves HEAD,
/// listings, copies and deletes of it, with the attributes and one ETag per write.
#[tokio::test]
async fn objects_the_local_writer_stores_are_served_by_s3s_fs_alike() {
    let (dir, _gateway, s3) = local_gateway().await;
    let body = pseudo_random(300_000, 4);
    let put = |key: &'static str, body: Vec<u8>| {
        s3.put_object()
            .bucket(BUCKET)
            .key(key)
            .content_type("application/x-test")
            .metadata("owner", "kura")
            .body(body.into())
            .send()
    };
    let first = put("dir/obj", body.clone()).await.unwrap().e_tag.unwrap();
    let head = s3
        .head_object()
        .bucket(BUCKET)
        .key("dir/obj")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length, Some(300_000));
    assert_eq!(head.content_type.as_deref(), Some("application/x-test"));
    assert_eq!(head.metadata.unwrap()["owner"], "kura");
    assert_eq!(head.e_tag.as_deref(), Some(first.as_str()));
    let list = s3.list_objects_v2().bucket(BUCKET).send().await.unwrap();
    let listed = &list.contents()[0];
    assert_eq!(
        (listed.key(), listed.size),
        (Some("dir/obj"), Some(300_000))
    );

    // A second write of the same bytes is a new version: a new ETag.
    let second = put("dir/obj", body.clone()).await.unwrap().e_tag.unwrap();
    assert_ne!(first, second);
    s3.copy_object()
        .bucket(BUCKET)
        .key("copy")
        .copy_source(format!("{BUCKET}/dir/obj"))
        .send()
        .await
        .unwrap();
    let copied = s3
        .get_object()
        .bucket(BUCKET)
        .key("copy")
        .send()
        .await
        .unwrap();
    assert_eq!(
        copied.body.collect().await.unwrap().into_bytes().as_ref(),
        body
    );

    // A client's Content-MD5 is checked by the gateway against the plaintext; the store
    // gets the ciphertext without one.
    let small = b"checked by md5".to_vec();
    let md5 =
        base64::engine::Engine::encode(&base64::engine::general_purpose::STANDARD, md5_of(&small));
    s3.put_object()
        .bucket(BUCKET)
        .key("md5")
        .content_md5(md5)
        .body(small.clone().into())
        .send()
        .await
        .unwrap();
    let got = s3
        .get_object()
        .bucket(BUCKET)
        .key("md5")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        small
    );

    // The local writer stored these, not s3s-fs: s3s-fs's ETag would be the MD5 of the
    // stored file, and the local writer hashes nothing.
    for key in ["dir/obj", "md5"] {
        assert_ne!(
            stored_etag(dir.path(), key),
            stored_md5(dir.path(), key),
            "{key}"
        );
    }

    for key in ["dir/obj", "copy", "md5"] {
        s3.delete_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .unwrap();
    }
    assert!(
        root_files(dir.path()).is_empty(),
        "sidecars or temporary files left: {:?}",
        root_files(dir.path())
    );
}

/// The ETag s3s-fs's sidecar holds for `key`.
fn stored_etag(root: &std::path::Path, key: &str) -> String {
    use base64::engine::{Engine as _, general_purpose::URL_SAFE_NO_PAD};
    let name = format!(
        ".bucket-{}.object-{}.internal.json",
        URL_SAFE_NO_PAD.encode(BUCKET),
        URL_SAFE_NO_PAD.encode(key)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join(name)).unwrap()).unwrap();
    json["e_tag"].as_str().unwrap().to_string()
}

/// The MD5 of the stored (encrypted) file of `key`, in hex.
fn stored_md5(root: &std::path::Path, key: &str) -> String {
    hex::encode(md5_of(&std::fs::read(root.join(BUCKET).join(key)).unwrap()))
}

fn md5_of(b: &[u8]) -> [u8; 16] {
    use s3s::crypto::Checksum as _;
    s3s::crypto::Md5::checksum(b)
}

/// Several PUTs of one key at once (backups storing the same content-addressed pack):
/// the object read afterwards is one of them whole, never one's body with another's
/// sidecars (which the gateway refuses as belonging to another object).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_puts_of_one_key_leave_one_whole_object() {
    let (_dir, _gateway, s3) = local_gateway().await;
    let bodies: Vec<Vec<u8>> = (0..8).map(|i| pseudo_random(1 << 20, 100 + i)).collect();
    for round in 0..4 {
        let puts = bodies.iter().map(|b| {
            s3.put_object()
                .bucket(BUCKET)
                .key("same")
                .body(b.clone().into())
                .send()
        });
        for put in futures::future::join_all(puts).await {
            put.unwrap();
        }
        let got = s3.get_object().bucket(BUCKET).key("same").send().await;
        let got = got.unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        let got = got.body.collect().await.unwrap().into_bytes();
        assert!(
            bodies.iter().any(|b| b.as_slice() == got.as_ref()),
            "round {round}"
        );
    }
}

#[tokio::test]
async fn head_get_and_delete_of_a_key_naming_a_directory_answer_as_s3_does() {
    let (_dir, _gateway, s3) = local_gateway().await;
    let body = pseudo_random(70_000, 9);
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

/// Regression: the embedded store keeps modification times finer than a second, and a
/// client that sent back the Last-Modified it was given (whole seconds) got 412 for
/// If-Unmodified-Since and the body again for If-Modified-Since.
#[tokio::test(flavor = "multi_thread")]
async fn conditions_on_the_last_modified_a_client_was_given() {
    let (_dir, _gateway, s3) = local_gateway().await;
    s3.put_object()
        .bucket(BUCKET)
        .key("t")
        .body(pseudo_random(1000, 5).into())
        .send()
        .await
        .unwrap();
    let seen = s3
        .head_object()
        .bucket(BUCKET)
        .key("t")
        .send()
        .await
        .unwrap()
        .last_modified
        .unwrap();
    assert_eq!(seen.subsec_nanos(), 0, "an HTTP date has whole seconds");
    let unmodified = s3
        .get_object()
        .bucket(BUCKET)
        .key("t")
        .if_unmodified_since(seen)
        .send()
        .await;
    assert!(unmodified.is_ok(), "{unmodified:?}");
    let ranged = s3
        .get_object()
        .bucket(BUCKET)
        .key("t")
        .range("bytes=0-9")
        .if_unmodified_since(seen)
        .send()
        .await;
    assert!(ranged.is_ok(), "{ranged:?}");
    let modified = s3
        .get_object()
        .bucket(BUCKET)
        .key("t")
        .if_modified_since(seen)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&modified), Some(304));
}

/// Regression: s3s-fs deleted a bucket with everything in it (`remove_dir_all`); S3 answers
/// 409 BucketNotEmpty, and rclone's `rmdir` relies on that.
#[tokio::test]
async fn a_bucket_with_objects_is_not_deleted() {
    let (_dir, _gateway, s3) = local_gateway().await;
    crate::harness::put(&s3, "keep/me", b"precious").await;
    let err = s3.delete_bucket().bucket(BUCKET).send().await.unwrap_err();
    assert_eq!(status(&err), Some(409));
    assert_eq!(
        crate::harness::code(&err).as_deref(),
        Some("BucketNotEmpty")
    );
    assert_eq!(crate::harness::get(&s3, "keep/me").await, b"precious");
    s3.delete_object()
        .bucket(BUCKET)
        .key("keep/me")
        .send()
        .await
        .unwrap();
    s3.delete_bucket().bucket(BUCKET).send().await.unwrap();
}

/// Regression: `a//b` is the file of `a/b` to s3s-fs. A PUT of it replaced `a/b`'s body
/// under `a/b`'s old sidecars, and a delete of it deleted `a/b`. Such keys are refused, and
/// so are keys too long for the store's file names (which failed half-way with a 500).
#[tokio::test]
async fn keys_the_store_cannot_keep_are_refused_and_harm_nothing() {
    let (_dir, _gateway, s3) = local_gateway().await;
    crate::harness::put(&s3, "a/b", b"the real one").await;
    let err = s3
        .put_object()
        .bucket(BUCKET)
        .key("a//b")
        .body(b"impostor".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(400));
    // Such a key cannot be there: its delete succeeds and deletes nothing.
    s3.delete_object()
        .bucket(BUCKET)
        .key("a//b")
        .send()
        .await
        .unwrap();
    let err = s3
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("a//b")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(400));
    assert_eq!(crate::harness::get(&s3, "a/b").await, b"the real one");
    let long = "k".repeat(400);
    let err = s3
        .put_object()
        .bucket(BUCKET)
        .key(&long)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(400));
    assert_eq!(
        crate::harness::code(&err).as_deref(),
        Some("KeyTooLongError")
    );
}

/// Regression: deletes left a key's directories behind, and a later PUT of a key naming one
/// of them failed with a 500 on every retry (the rename met a directory).
#[tokio::test]
async fn a_deleted_key_leaves_no_directory_in_the_way() {
    let (dir, _gateway, s3) = local_gateway().await;
    crate::harness::put(&s3, "x/y/z", b"deep").await;
    s3.delete_object()
        .bucket(BUCKET)
        .key("x/y/z")
        .send()
        .await
        .unwrap();
    assert!(!dir.path().join(BUCKET).join("x").exists());
    crate::harness::put(&s3, "x", b"flat").await;
    assert_eq!(crate::harness::get(&s3, "x").await, b"flat");
    assert!(dir.path().join(BUCKET).is_dir(), "the bucket stays");
}

/// Regression: s3s-fs moved the upload's attributes onto the object and dropped the upload
/// before it checked the part list, so a completion that left out part 2 made the existing
/// object unreadable and the upload impossible to retry or abort. The list is checked
/// first: the old object stays readable, and the upload can still be completed.
#[tokio::test(flavor = "multi_thread")]
async fn a_completion_with_a_gap_changes_nothing() {
    let (_dir, _gateway, s3) = local_gateway().await;
    let old = pseudo_random(1000, 7);
    crate::harness::put(&s3, "obj", &old).await;
    let id = s3
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("obj")
        .metadata("generation", "new")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let part = pseudo_random(5 * 1024 * 1024, 8);
    let mut done = Vec::new();
    for n in [1, 2, 3] {
        let out = s3
            .upload_part()
            .bucket(BUCKET)
            .key("obj")
            .upload_id(&id)
            .part_number(n)
            .body(part.clone().into())
            .send()
            .await
            .unwrap();
        done.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(n)
                .e_tag(out.e_tag.unwrap())
                .build(),
        );
    }
    let complete = |parts: Vec<aws_sdk_s3::types::CompletedPart>| {
        s3.complete_multipart_upload()
            .bucket(BUCKET)
            .key("obj")
            .upload_id(&id)
            .multipart_upload(
                aws_sdk_s3::types::CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
    };
    let gap = vec![done[0].clone(), done[2].clone()];
    let err = complete(gap).await.unwrap_err();
    assert_eq!(status(&err), Some(400), "{err:?}");
    assert!(
        crate::harness::get(&s3, "obj").await == old,
        "the old object is whole"
    );
    complete(done).await.unwrap();
    let whole: Vec<u8> = part.iter().chain(&part).chain(&part).copied().collect();
    assert!(crate::harness::get(&s3, "obj").await == whole);
}

/// s3s-fs ignores If-Match on DeleteObject; the store checks it.
#[tokio::test]
async fn a_conditional_delete_of_a_changed_object_is_refused() {
    let (_dir, _gateway, s3) = local_gateway().await;
    let first = crate::harness::put(&s3, "c", b"one").await.e_tag.unwrap();
    crate::harness::put(&s3, "c", b"two").await;
    let err = s3
        .delete_object()
        .bucket(BUCKET)
        .key("c")
        .if_match(&first)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(412));
    assert_eq!(crate::harness::get(&s3, "c").await, b"two");
    let current = s3
        .head_object()
        .bucket(BUCKET)
        .key("c")
        .send()
        .await
        .unwrap()
        .e_tag
        .unwrap();
    s3.delete_object()
        .bucket(BUCKET)
        .key("c")
        .if_match(&current)
        .send()
        .await
        .unwrap();
}

/// A client that goes away in the middle of a PUT's body leaves no temporary file behind
/// (the store's root holds only sidecars afterwards), and the key is not created.
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_broken_off_leaves_no_temporary_file() {
    let (dir, _gateway, s3) = local_gateway().await;
    let chunks = futures::stream::iter((0..40).map(|i| {
        if i < 8 {
            Ok(hyper::body::Frame::data(bytes::Bytes::from(vec![
                7u8;
                256 * 1024
            ])))
        } else {
            Err(std::io::Error::other("the client gives up"))
        }
    }));
    let body =
        aws_sdk_s3::primitives::ByteStream::from_body_1_x(http_body_util::StreamBody::new(chunks));
    let result = s3
        .put_object()
        .bucket(BUCKET)
        .key("broken")
        .content_length(10 * 1024 * 1024)
        .body(body)
        .send()
        .await;
    assert!(result.is_err());
    // The gateway notices the broken connection on its own time.
    let mut left = Vec::new();
    for _ in 0..50 {
        left = root_files(dir.path())
            .into_iter()
            .filter(|n| n.starts_with(".tmp."))
            .collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "temporary files left: {left:?}");
    let err = s3
        .head_object()
        .bucket(BUCKET)
        .key("broken")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(404));
}

/// s3s-fs ignores `x-amz-copy-source-if-match`; the store checks it, under the source's
/// lock. The gateway pins the pieces of its server-side copies (large copies, the trailer
/// rewrite of irregular uploads) to the object it read, and a copy must not mix in bytes
/// of an object written since. Called directly, with no gateway in front.
#[tokio::test(flavor = "multi_thread")]
async fn copies_hold_to_the_source_they_were_pinned_to() {
    let store = crate::harness::Upstream::local_dir().await;
    let s3 = client(store.addr, crate::harness::UP_AK, crate::harness::UP_SK);
    s3.create_bucket().bucket(BUCKET).send().await.unwrap();
    let old = crate::harness::put(&s3, "src", b"first")
        .await
        .e_tag
        .unwrap();
    let new = crate::harness::put(&s3, "src", b"second")
        .await
        .e_tag
        .unwrap();
    let id = s3
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("dst")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let part_copy = |pin: &str| {
        s3.upload_part_copy()
            .bucket(BUCKET)
            .key("dst")
            .upload_id(&id)
            .part_number(1)
            .copy_source(format!("{BUCKET}/src"))
            .copy_source_if_match(pin)
            .send()
    };
    let err = part_copy(&old).await.unwrap_err();
    assert_eq!(status(&err), Some(412));
    let part = part_copy(&new).await.unwrap();
    s3.complete_multipart_upload()
        .bucket(BUCKET)
        .key("dst")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.copy_part_result.unwrap().e_tag.unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(crate::harness::get(&s3, "dst").await, b"second");
    let err = s3
        .copy_object()
        .bucket(BUCKET)
        .key("copy")
        .copy_source(format!("{BUCKET}/src"))
        .copy_source_if_match(&old)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(412));
}

/// Conditional PUTs are written by the store's own writer, which checks the condition
/// under the key's lock just before the object goes in place (s3s-fs held the lock for the
/// whole body, so a slow client stalled every key sharing its lock).
#[tokio::test(flavor = "multi_thread")]
async fn conditional_puts_hold_their_conditions() {
    let (_dir, _gateway, s3) = local_gateway().await;
    let put = |body: &'static [u8]| {
        s3.put_object()
            .bucket(BUCKET)
            .key("cond")
            .body(body.to_vec().into())
    };
    put(b"one").if_none_match("*").send().await.unwrap();
    let err = put(b"two").if_none_match("*").send().await.unwrap_err();
    assert_eq!(status(&err), Some(412));
    let current = s3
        .head_object()
        .bucket(BUCKET)
        .key("cond")
        .send()
        .await
        .unwrap()
        .e_tag
        .unwrap();
    let err = put(b"three")
        .if_match("\"0123456789abcdef0123456789abcdef-0\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(412));
    assert_eq!(crate::harness::get(&s3, "cond").await, b"one");
    put(b"four").if_match(&current).send().await.unwrap();
    assert_eq!(crate::harness::get(&s3, "cond").await, b"four");
}

/// What S3 answers for a listing of `keys`: one page, as (keys, common prefixes, next
/// start), from the sorted key list. The oracle for the store's directory walk.
/// A listing page's keys and common prefixes.
fn page_names(
    contents: &[aws_sdk_s3::types::Object],
    prefixes: &[aws_sdk_s3::types::CommonPrefix],
) -> (Vec<String>, Vec<String>) {
    (
        contents
            .iter()
            .map(|o| o.key().unwrap().to_string())
            .collect(),
        prefixes
            .iter()
            .map(|p| p.prefix().unwrap().to_string())
            .collect(),
    )
}

fn model_page(
    keys: &[&str],
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max_keys: usize,
) -> (Vec<String>, Vec<String>, Option<String>) {
    let mut items: Vec<(String, bool)> = Vec::new();
    for k in keys.iter().filter(|k| k.starts_with(prefix)) {
        let group = delimiter.and_then(|d| {
            k[prefix.len()..]
                .find(d)
                .map(|i| k[..prefix.len() + i + d.len()].to_string())
        });
        let item = match group {
            Some(cp) => (cp, true),
            None => ((*k).to_string(), false),
        };
        if after.is_some_and(|a| item.0.as_str() <= a) || items.last() == Some(&item) {
            continue;
        }
        items.push(item);
    }
    let next = (items.len() > max_keys).then(|| items[max_keys - 1].0.clone());
    items.truncate(max_keys);
    let (prefixes, contents): (Vec<_>, Vec<_>) = items.into_iter().partition(|(_, cp)| *cp);
    (
        contents.into_iter().map(|(k, _)| k).collect(),
        prefixes.into_iter().map(|(k, _)| k).collect(),
        next,
    )
}

/// The store lists in S3's byte order page by page, for every mix of prefix, delimiter,
/// start-after and page size, as the sorted-list model does, ETags included. Keys are
/// chosen where directory order and key order differ (`a-b` < `a/b` < `a0`, and the
/// marker `a/` before all of `a/`'s keys).
#[tokio::test(flavor = "multi_thread")]
async fn listings_walk_the_store_in_key_order_page_by_page() {
    let store = crate::harness::Upstream::local_dir().await;
    let s3 = client(store.addr, crate::harness::UP_AK, crate::harness::UP_SK);
    s3.create_bucket().bucket(BUCKET).send().await.unwrap();
    let mut keys = vec![
        "a-b", "a/b", "a/c/d", "a/c/e", "a0", "ab/x", "b", "c.txt", "c/d/e/f", "c/d/g", "z",
        // Folder markers, kept as files inside their directories.
        // `-` sorts before the marker file's name, `a/` before `a/-x`.
        "a/", "a/-x", "a/c/", "c/d/", "e/",
    ];
    for k in &keys {
        crate::harness::put(&s3, k, k.as_bytes()).await;
    }
    keys.sort_unstable();
    for prefix in ["", "a", "a/", "c/d/", "q"] {
        for delimiter in [None, Some("/"), Some("-")] {
            for start in [None, Some("a/b"), Some("a/c/"), Some("b")] {
                for max_keys in [1, 2, 3, 1000] {
                    let what = format!("{prefix:?} {delimiter:?} {start:?} {max_keys}");
                    let mut token: Option<String> = None;
                    let mut after = start.map(str::to_string);
                    loop {
                        let out = s3
                            .list_objects_v2()
                            .bucket(BUCKET)
                            .prefix(prefix)
                            .set_delimiter(delimiter.map(str::to_string))
                            .set_start_after(start.map(str::to_string))
                            .set_continuation_token(token.clone())
                            .max_keys(max_keys)
                            .send()
                            .await
                            .unwrap();
                        let want = model_page(
                            &keys,
                            prefix,
                            delimiter,
                            after.as_deref(),
                            usize::try_from(max_keys).unwrap(),
                        );
                        let got = page_names(out.contents(), out.common_prefixes());
                        assert_eq!((&got.0, &got.1), (&want.0, &want.1), "{what}");
                        for o in out.contents() {
                            assert_eq!(o.size(), Some(o.key().unwrap().len() as i64), "{what}");
                            assert!(o.e_tag().is_some(), "{what}: ETag of {:?}", o.key());
                        }
                        assert_eq!(out.is_truncated(), Some(want.2.is_some()), "{what}");
                        // ListObjects V1 from the same point: the marker is where to start.
                        let v1 = s3
                            .list_objects()
                            .bucket(BUCKET)
                            .prefix(prefix)
                            .set_delimiter(delimiter.map(str::to_string))
                            .set_marker(after.clone())
                            .max_keys(max_keys)
                            .send()
                            .await
                            .unwrap();
                        let v1_got = page_names(v1.contents(), v1.common_prefixes());
                        assert_eq!((&v1_got.0, &v1_got.1), (&want.0, &want.1), "V1 {what}");
                        assert_eq!(v1.next_marker(), want.2.as_deref(), "V1 {what}");
                        if want.2.is_none() {
                            break;
                        }
                        token = out.next_continuation_token().map(str::to_string);
                        after.clone_from(&want.2);
                    }
                }
            }
        }
    }
}

/// Folder markers (`dir/`, a zero-byte object that S3 consoles and rclone's directory
/// markers create) are stored, read, copied and listed as on S3, beside the keys below
/// them. s3s-fs kept them as bare directories, which refused kura's body (400).
#[tokio::test(flavor = "multi_thread")]
async fn folder_markers_round_trip() {
    let (_dir, _gateway, s3) = local_gateway().await;
    put_folder(&s3).await;
    assert!(crate::harness::get(&s3, "folder/").await.is_empty());
    assert_eq!(
        crate::harness::get(&s3, "folder/sub/").await,
        b"marker with a body"
    );
    let head = s3
        .head_object()
        .bucket(BUCKET)
        .key("folder/")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(0));
    // `folder` is neither the marker nor an object.
    let missing = s3.head_object().bucket(BUCKET).key("folder").send().await;
    assert_eq!(status(&missing.unwrap_err()), Some(404));

    let all = [
        ("folder/", 0),
        ("folder/a", 1),
        ("folder/sub/", 18),
        ("folder0", 1),
    ];
    assert_eq!(env_list(&s3).await, owned(&all));
    let in_folder = s3
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix("folder/")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = in_folder
        .contents()
        .iter()
        .filter_map(|o| o.key())
        .collect();
    let prefixes: Vec<&str> = in_folder
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(
        (keys, prefixes),
        (vec!["folder/", "folder/a"], vec!["folder/sub/"])
    );

    s3.copy_object()
        .bucket(BUCKET)
        .key("copy/")
        .copy_source(format!("{BUCKET}/folder/sub/"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        crate::harness::get(&s3, "copy/").await,
        b"marker with a body"
    );

    // The marker's file name is not a key clients may use.
    let reserved = s3
        .put_object()
        .bucket(BUCKET)
        .key("folder/.kura-folder-marker")
        .body(b"x".to_vec().into())
        .send()
        .await;
    assert_eq!(status(&reserved.unwrap_err()), Some(400));
    assert_eq!(crate::harness::get(&s3, "folder/").await, b"");
}

/// Deleting a folder marker leaves the keys below it; deleting those (in a batch, whose
/// answer names the keys as the client did) removes the directory.
#[tokio::test(flavor = "multi_thread")]
async fn folder_markers_are_deleted_alone() {
    let (dir, _gateway, s3) = local_gateway().await;
    put_folder(&s3).await;
    s3.delete_object()
        .bucket(BUCKET)
        .key("folder/")
        .send()
        .await
        .unwrap();
    let all = [("folder/a", 1), ("folder/sub/", 18), ("folder0", 1)];
    assert_eq!(env_list(&s3).await, owned(&all));
    let gone = delete_batch(&s3, &["folder/a", "folder/sub/"]).await;
    assert_eq!(gone, ["folder/a", "folder/sub/"]);
    assert_eq!(env_list(&s3).await, owned(&[("folder0", 1)]));
    assert!(!dir.path().join(BUCKET).join("folder").exists());
}

/// A multipart upload to a folder marker's key completes to the marker.
#[tokio::test(flavor = "multi_thread")]
async fn folder_markers_by_multipart_upload() {
    let (_dir, _gateway, s3) = local_gateway().await;
    let body = pseudo_random(6 << 20, 9);
    let (id, part) = one_part(&s3, "mp/", &body).await;
    let parts = s3
        .list_parts()
        .bucket(BUCKET)
        .key("mp/")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(parts.parts().len(), 1);
    let done = try_complete(&s3, "mp/", &id, vec![part]).await.unwrap();
    assert_eq!(done.key(), Some("mp/"));
    assert_eq!(crate::harness::get(&s3, "mp/").await, body);
    assert_eq!(env_list(&s3).await, owned(&[("mp/", 6 << 20)]));
}

/// The store's own answers name a marker's key as the client did, not its file.
#[tokio::test(flavor = "multi_thread")]
async fn the_store_answers_with_the_markers_key() {
    let store = crate::harness::Upstream::local_dir().await;
    let s3 = client(store.addr, crate::harness::UP_AK, crate::harness::UP_SK);
    s3.create_bucket().bucket(BUCKET).send().await.unwrap();
    let upload = s3
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("mp/")
        .send()
        .await
        .unwrap();
    assert_eq!(upload.key(), Some("mp/"));
    let id = upload.upload_id().unwrap();
    let part = crate::multipart::upload(&s3, "mp/", id, 1, b"part".to_vec()).await;
    let parts = s3
        .list_parts()
        .bucket(BUCKET)
        .key("mp/")
        .upload_id(id)
        .send()
        .await
        .unwrap();
    assert_eq!(parts.key(), Some("mp/"));
    let done = try_complete(&s3, "mp/", id, vec![part]).await.unwrap();
    assert_eq!(done.key(), Some("mp/"));
    assert_eq!(crate::harness::get(&s3, "mp/").await, b"part");
    // The store itself finds nothing under the marker file's name (the gateway answers
    // its own GET of a copy source before the store sees the copy).
    let copy = s3
        .copy_object()
        .bucket(BUCKET)
        .key("copy")
        .copy_source(format!("{BUCKET}/mp/.kura-folder-marker"))
        .send()
        .await;
    assert_eq!(status(&copy.unwrap_err()), Some(404));
}

/// `a` and `a/b` (or the marker `a/`) cannot both be files of the store: the second write
/// is a 400 that names the first, where it was a 500 that clients retried, and neither
/// object is harmed.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_where_another_keys_file_lies_is_refused_by_name() {
    let (_dir, _gateway, s3) = local_gateway().await;
    crate::harness::put(&s3, "a", b"x").await;
    crate::harness::put(&s3, "c/", b"marker").await;
    for (key, names) in [("a/", "`a`"), ("a/b", "`a`"), ("c", "below `c/`")] {
        let err = s3
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .body(b"y".to_vec().into())
            .send()
            .await
            .unwrap_err();
        assert_eq!(status(&err), Some(400), "{key}");
        let message = aws_sdk_s3::error::ProvideErrorMetadata::message(&err).unwrap_or_default();
        assert!(message.contains(names), "{key}: {message}");
        let copy = s3
            .copy_object()
            .bucket(BUCKET)
            .key(key)
            .copy_source(format!("{BUCKET}/a"))
            .send()
            .await;
        assert_eq!(status(&copy.unwrap_err()), Some(400), "copy to {key}");
        let upload = s3
            .create_multipart_upload()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await;
        assert_eq!(status(&upload.unwrap_err()), Some(400), "upload to {key}");
    }
    // An upload whose path an object took after it began is refused at completion (s3s-fs
    // answered 500, and had dropped the upload by then).
    let body = pseudo_random(6 << 20, 3);
    let (id, part) = one_part(&s3, "d/x", &body).await;
    crate::harness::put(&s3, "d", b"d").await;
    let done = try_complete(&s3, "d/x", &id, vec![part.clone()])
        .await
        .unwrap_err();
    assert_eq!(status(&done), Some(400));
    let message = aws_sdk_s3::error::ProvideErrorMetadata::message(&done).unwrap_or_default();
    assert!(message.contains("`d`"), "{message}");
    assert_eq!(crate::harness::get(&s3, "a").await, b"x");
    assert_eq!(crate::harness::get(&s3, "c/").await, b"marker");
    assert_eq!(crate::harness::get(&s3, "d").await, b"d");
    // The upload is still there, and completes once the way is clear.
    s3.delete_object()
        .bucket(BUCKET)
        .key("d")
        .send()
        .await
        .unwrap();
    try_complete(&s3, "d/x", &id, vec![part]).await.unwrap();
    assert!(crate::harness::get(&s3, "d/x").await == body);
}

/// Regression: DeleteObjects of a key whose path holds no file of its own (`a/` while `a`
/// is an object, `c` while `c/` is) failed the whole batch with a 500, after deleting
/// part of it; such keys are not there, and the rest of the batch is deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_delete_of_keys_without_a_file_deletes_the_rest() {
    let (_dir, _gateway, s3) = local_gateway().await;
    crate::harness::put(&s3, "a", b"a").await;
    crate::harness::put(&s3, "c/", b"c").await;
    crate::harness::put(&s3, "e", b"e").await;
    let keys = ["a/", "c", "e", "c/.kura-folder-marker"];
    let deleted = delete_batch(&s3, &keys).await;
    let mut want = keys.to_vec();
    want.sort_unstable();
    assert_eq!(deleted, want);
    assert_eq!(env_list(&s3).await, owned(&[("a", 1), ("c/", 1)]));
}

/// DeleteObjects' per-key ETags hold on the embedded store (s3s-fs ignores them): a key
/// whose object changed, or is not there, is refused in the answer and kept.
#[tokio::test(flavor = "multi_thread")]
async fn batch_deletes_hold_to_their_etags() {
    let (_dir, _gateway, s3) = local_gateway().await;
    let first = crate::harness::put(&s3, "k1", b"one").await.e_tag.unwrap();
    crate::harness::put(&s3, "m/", b"m").await;
    crate::harness::put(&s3, "k2", b"two").await;
    crate::harness::put(&s3, "k3", b"three").await;
    let id = |key: &str, etag: Option<&str>| {
        aws_sdk_s3::types::ObjectIdentifier::builder()
            .key(key)
            .set_e_tag(etag.map(str::to_string))
            .build()
            .unwrap()
    };
    let batch = aws_sdk_s3::types::Delete::builder()
        .objects(id("k1", Some(&first)))
        .objects(id("k2", Some(&first)))
        .objects(id("k3", None))
        .objects(id("gone", Some(&first)))
        .objects(id("m/", Some(&first)))
        .build()
        .unwrap();
    let out = s3
        .delete_objects()
        .bucket(BUCKET)
        .delete(batch)
        .send()
        .await
        .unwrap();
    let mut deleted: Vec<&str> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort_unstable();
    assert_eq!(deleted, ["k1", "k3"]);
    let mut errors: Vec<(&str, &str)> = out
        .errors()
        .iter()
        .map(|e| (e.key().unwrap(), e.code().unwrap()))
        .collect();
    errors.sort_unstable();
    assert_eq!(
        errors,
        [
            ("gone", "NoSuchKey"),
            ("k2", "PreconditionFailed"),
            ("m/", "PreconditionFailed")
        ]
    );
    assert_eq!(env_list(&s3).await, owned(&[("k2", 3), ("m/", 1)]));
}

/// The marker file's name is no key: writing it is refused, and reading, copying or
/// deleting it finds nothing (it is never the marker's object).
#[tokio::test(flavor = "multi_thread")]
async fn the_marker_files_name_is_no_key() {
    let (_dir, _gateway, s3) = local_gateway().await;
    crate::harness::put(&s3, "f/", b"marker").await;
    let reserved = "f/.kura-folder-marker";
    let get = s3.get_object().bucket(BUCKET).key(reserved).send().await;
    assert_eq!(status(&get.unwrap_err()), Some(404));
    let head = s3.head_object().bucket(BUCKET).key(reserved).send().await;
    assert_eq!(status(&head.unwrap_err()), Some(404));
    let copy = s3
        .copy_object()
        .bucket(BUCKET)
        .key("copy")
        .copy_source(format!("{BUCKET}/{reserved}"))
        .send()
        .await;
    assert_eq!(status(&copy.unwrap_err()), Some(404));
    s3.delete_object()
        .bucket(BUCKET)
        .key(reserved)
        .send()
        .await
        .unwrap();
    assert_eq!(crate::harness::get(&s3, "f/").await, b"marker");
}

/// A delete tidies the directories it empties only while no write runs; empty ones left
/// behind (made by hand here) are removed when a key's file needs their place. They were
/// a 500 on every retry, as the rename met a directory.
#[tokio::test(flavor = "multi_thread")]
async fn empty_directories_left_in_the_way_are_removed() {
    let (dir, _gateway, s3) = local_gateway().await;
    let bucket = dir.path().join(BUCKET);
    std::fs::create_dir_all(bucket.join("x")).unwrap();
    std::fs::create_dir_all(bucket.join("y/z/w")).unwrap();
    std::fs::create_dir_all(bucket.join("y/v")).unwrap();
    crate::harness::put(&s3, "x", b"flat").await;
    crate::harness::put(&s3, "y", b"nested").await;
    assert_eq!(crate::harness::get(&s3, "x").await, b"flat");
    assert_eq!(crate::harness::get(&s3, "y").await, b"nested");
    // A file below, even one that is no object, is not the store's to remove.
    std::fs::create_dir_all(bucket.join("q/r")).unwrap();
    std::fs::write(bucket.join("q/r/stray"), b"stray").unwrap();
    let blocked = s3
        .put_object()
        .bucket(BUCKET)
        .key("q")
        .body(b"q".to_vec().into())
        .send()
        .await;
    assert_eq!(status(&blocked.unwrap_err()), Some(400));
    assert!(bucket.join("q/r/stray").is_file());
}

/// Deletes `keys` with one DeleteObjects: the keys it reports deleted, sorted. It must
/// report no errors.
async fn delete_batch(s3: &aws_sdk_s3::Client, keys: &[&str]) -> Vec<String> {
    let mut batch = aws_sdk_s3::types::Delete::builder();
    for key in keys {
        let id = aws_sdk_s3::types::ObjectIdentifier::builder()
            .key(*key)
            .build();
        batch = batch.objects(id.unwrap());
    }
    let out = s3
        .delete_objects()
        .bucket(BUCKET)
        .delete(batch.build().unwrap())
        .send()
        .await
        .unwrap();
    assert!(out.errors().is_empty(), "{:?}", out.errors());
    let mut deleted: Vec<String> = out
        .deleted()
        .iter()
        .filter_map(|d| d.key())
        .map(str::to_string)
        .collect();
    deleted.sort_unstable();
    deleted
}

/// The objects of the folder-marker tests: two markers, a key below one, one beside.
async fn put_folder(s3: &aws_sdk_s3::Client) {
    crate::harness::put(s3, "folder/", b"").await;
    crate::harness::put(s3, "folder/a", b"a").await;
    crate::harness::put(s3, "folder/sub/", b"marker with a body").await;
    crate::harness::put(s3, "folder0", b"0").await;
}

fn owned(list: &[(&str, i64)]) -> Vec<(String, Option<i64>)> {
    list.iter()
        .map(|(k, n)| ((*k).to_string(), Some(*n)))
        .collect()
}

/// Starts a multipart upload of `key` and uploads `body` as its part 1.
async fn one_part(s3: &aws_sdk_s3::Client, key: &str, body: &[u8]) -> (String, CompletedPart) {
    let id = crate::multipart::create(s3, key).await;
    let part = crate::multipart::upload(s3, key, &id, 1, body.to_vec()).await;
    (id, part)
}

async fn env_list(s3: &aws_sdk_s3::Client) -> Vec<(String, Option<i64>)> {
    let out = s3.list_objects_v2().bucket(BUCKET).send().await.unwrap();
    out.contents()
        .iter()
        .map(|o| (o.key().unwrap().to_string(), o.size()))
        .collect()
}

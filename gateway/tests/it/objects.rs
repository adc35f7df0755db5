//! Single objects: edge sizes, every range form, conditional reads, metadata, deletes.

use std::fmt::Write as _;
use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;

use crate::harness::{BUCKET, Env, code, pseudo_random, status};

const SEG: usize = 65_536;

#[tokio::test(flavor = "multi_thread")]
async fn edge_sizes_round_trip_with_exact_sizes_everywhere() {
    let env = Env::start().await;
    for (i, len) in [0, 1, SEG - 1, SEG, SEG + 1, 3 * SEG + 12_345]
        .into_iter()
        .enumerate()
    {
        let key = format!("edge/{len}");
        let body = pseudo_random(len, i as u64);
        env.put(&key, &body).await;
        assert_eq!(env.get(&key).await, body, "GET of {len} bytes");
        let head = env
            .client
            .head_object()
            .bucket(BUCKET)
            .key(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(head.content_length, Some(len as i64), "HEAD size of {len}");
        let stored = std::fs::metadata(env.stored_path(BUCKET, &key))
            .unwrap()
            .len();
        assert_eq!(
            Some(stored),
            kura_keys::ciphertext_size(len as u64),
            "stored size of {len}"
        );
    }
    let list = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix("edge/")
        .send()
        .await
        .unwrap();
    for o in list.contents() {
        let want: i64 = o
            .key()
            .unwrap()
            .trim_start_matches("edge/")
            .parse()
            .unwrap();
        assert_eq!(o.size(), Some(want), "listed size of {:?}", o.key());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn large_object_streams_through() {
    let env = Env::start().await;
    let len = 256 << 20;
    let body = pseudo_random(len, 77);
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("big")
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    let got = env.get("big").await;
    assert!(got == body, "256 MiB object differs after the round trip");
    assert_eq!(
        env.get_range("big", "bytes=200000000-200000099")
            .await
            .unwrap(),
        &body[200_000_000..200_000_100]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_range_form_matches_the_plaintext() {
    let env = Env::start().await;
    let len = 5 * SEG + 777;
    let body = pseudo_random(len, 3);
    env.put("r", &body).await;
    let cases: Vec<(String, &[u8])> = vec![
        ("bytes=0-0".into(), &body[..1]),
        ("bytes=0-".into(), &body[..]),
        (format!("bytes={}-{}", SEG - 1, SEG), &body[SEG - 1..=SEG]),
        ("bytes=-10".into(), &body[len - 10..]),
        (format!("bytes=-{}", len + 100), &body[..]),
        (
            format!("bytes={}-{}", len - 5, len + 1000),
            &body[len - 5..],
        ),
        (format!("bytes={}-", 4 * SEG + 3), &body[4 * SEG + 3..]),
    ];
    for (range, want) in cases {
        assert_eq!(env.get_range("r", &range).await.unwrap(), want, "{range}");
    }
    // Random closed ranges, checked against the plaintext.
    let mut x = 12345u64;
    for _ in 0..40 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = (x % len as u64) as usize;
        let b = a + ((x >> 20) % (len - a) as u64) as usize;
        assert_eq!(
            env.get_range("r", &format!("bytes={a}-{b}")).await.unwrap(),
            &body[a..=b],
            "bytes={a}-{b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unsatisfiable_range_is_416_with_content_range() {
    let env = Env::start().await;
    env.put("small", &pseudo_random(100, 1)).await;
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("small")
        .range("bytes=100-200")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(416));
    let raw = err.raw_response().unwrap();
    assert_eq!(raw.headers().get("content-range"), Some("bytes */100"));
    env.put("empty", b"").await;
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("empty")
        .range("bytes=0-0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(416));
}

#[tokio::test(flavor = "multi_thread")]
async fn conditional_reads_follow_the_etag_contract() {
    let env = Env::start().await;
    let put = env.put("c", &pseudo_random(3 * SEG, 9)).await;
    let etag = put.e_tag().unwrap().to_string();
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("c")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.e_tag(),
        Some(etag.as_str()),
        "PUT and HEAD agree on the ETag"
    );
    let trimmed = etag.trim_matches('"');
    assert!(
        !(trimmed.len() == 32 && trimmed.bytes().all(|b| b.is_ascii_hexdigit())),
        "an ETag that looks like an MD5 would mislead rclone: {etag}"
    );
    let list = env.list().await;
    if let Some(listed) = list.contents()[0].e_tag() {
        assert_eq!(listed, etag, "listing and HEAD agree on the ETag");
    }
    // aws-cli and the Go SDK send If-Match with the HEAD ETag on ranged reads.
    let ok = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("c")
        .range("bytes=10-20")
        .if_match(&etag)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.e_tag(), Some(etag.as_str()));
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("c")
        .if_match("\"nope-0\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(412));
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("c")
        .range("bytes=0-1")
        .if_match("\"nope-0\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(412));
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("c")
        .if_none_match(&etag)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(304));
    let future = aws_sdk_s3::primitives::DateTime::from_secs(4_000_000_000);
    let err = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("c")
        .if_modified_since(future)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(304));
    let past = aws_sdk_s3::primitives::DateTime::from_secs(1_000_000_000);
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("c")
        .if_unmodified_since(past)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(412));
}

#[tokio::test(flavor = "multi_thread")]
async fn user_metadata_round_trips_and_is_sealed_upstream() {
    let env = Env::start().await;
    env.client
        .put_object()
        .bucket(BUCKET)
        .key("m")
        .metadata("owner", "velero-secret-owner-name")
        .content_type("application/x-tar")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("m")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.metadata().unwrap().get("owner").map(String::as_str),
        Some("velero-secret-owner-name")
    );
    assert_eq!(
        head.metadata().unwrap().len(),
        1,
        "the gateway's own metadata stays hidden"
    );
    assert_eq!(head.content_type(), Some("application/x-tar"));
    let got = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("m")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.metadata().unwrap().get("owner").map(String::as_str),
        Some("velero-secret-owner-name")
    );
    for f in crate::harness::files_under(env.upstream.dir.path()) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !bytes.windows(12).any(|w| w == b"velero-secre"),
            "metadata value in clear in {}",
            f.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_remove_objects() {
    let env = Env::start().await;
    for k in ["a", "b", "c"] {
        env.put(k, b"x").await;
    }
    env.client
        .delete_object()
        .bucket(BUCKET)
        .key("a")
        .send()
        .await
        .unwrap();
    // A key the gateway refuses to name is answered for in the batch's errors; the rest of
    // the batch is deleted (regression: the whole batch was refused).
    let ids = ["b", "a/../c", "c"].map(|k| {
        aws_sdk_s3::types::ObjectIdentifier::builder()
            .key(k)
            .build()
            .unwrap()
    });
    let del = aws_sdk_s3::types::Delete::builder()
        .set_objects(Some(ids.to_vec()))
        .build()
        .unwrap();
    let out = env
        .client
        .delete_objects()
        .bucket(BUCKET)
        .delete(del)
        .send()
        .await
        .unwrap();
    let mut deleted: Vec<&str> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort_unstable();
    assert_eq!(deleted, ["b", "c"]);
    let errors: Vec<(Option<&str>, Option<&str>)> =
        out.errors().iter().map(|e| (e.key(), e.code())).collect();
    assert_eq!(errors, [(Some("a/../c"), Some("InvalidArgument"))]);
    let list = env.list().await;
    assert!(list.contents().is_empty());
    env.assert_absent("b", "deleted").await;
}

/// An append (`x-amz-write-offset-bytes`, S3 Express) is refused before anything is
/// stored: it would add a second whole body to the stored one, which would then not open.
#[tokio::test(flavor = "multi_thread")]
async fn appends_are_refused_and_leave_the_object_whole() {
    let env = Env::start().await;
    let body = pseudo_random(1000, 9);
    crate::harness::put(&env.client, "a", &body).await;
    let err = env
        .client
        .put_object()
        .bucket(BUCKET)
        .key("a")
        .write_offset_bytes(1000)
        .body(pseudo_random(10, 1).into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(501), "{err:?}");
    assert_eq!(
        crate::harness::code(&err).as_deref(),
        Some("NotImplemented")
    );
    assert!(crate::harness::get(&env.client, "a").await == body);
}

/// A HEAD with a `Range` answers as S3 does: 206, the range's length and `Content-Range`
/// for every range form, 416 for one that is not satisfiable.
#[tokio::test(flavor = "multi_thread")]
async fn head_with_a_range_describes_the_range() {
    let env = Env::start().await;
    env.put("small", &pseudo_random(100, 2)).await;
    let head = |range: &'static str| {
        env.client
            .head_object()
            .bucket(BUCKET)
            .key("small")
            .range(range)
            .send()
    };
    for (range, len, content_range) in [
        ("bytes=10-19", 10, "bytes 10-19/100"),
        ("bytes=-5", 5, "bytes 95-99/100"),
        ("bytes=90-", 10, "bytes 90-99/100"),
        ("bytes=90-1000", 10, "bytes 90-99/100"),
    ] {
        let out = head(range).await.unwrap();
        assert_eq!(out.content_length(), Some(len), "{range}");
        assert_eq!(out.content_range(), Some(content_range), "{range}");
    }
    // The status, which the SDK does not show: a presigned HEAD sent by hand.
    let presigned = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("small")
        .range("bytes=10-19")
        .presigned(PresigningConfig::expires_in(Duration::from_mins(5)).unwrap())
        .await
        .unwrap();
    let uri: http::Uri = presigned.uri().parse().unwrap();
    let mut raw = format!(
        "HEAD {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        uri.path_and_query().unwrap(),
        uri.authority().unwrap()
    );
    for (name, value) in presigned.headers() {
        write!(raw, "{name}: {value}\r\n").unwrap();
    }
    raw.push_str("\r\n");
    let answer = crate::harness::send_raw(env.gateway.addr, raw.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 206"), "{answer}");
    let err = head("bytes=100-").await.unwrap_err();
    assert_eq!(status(&err), Some(416));
}

/// A read may name a `Range` or a `partNumber`, not both: 400 InvalidRequest, as S3
/// answers (the gateway read the part and ignored the range).
#[tokio::test(flavor = "multi_thread")]
async fn range_and_part_number_together_are_refused() {
    let env = Env::start().await;
    env.put("small", &pseudo_random(100, 3)).await;
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("small")
        .range("bytes=0-9")
        .part_number(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(400));
    assert_eq!(code(&err).as_deref(), Some("InvalidRequest"));
    let err = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("small")
        .range("bytes=0-9")
        .part_number(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(400));
}

/// Regression: `partNumber=1` of an empty object was 416 on GET while HEAD answered 200.
/// The Go SDK's transfer manager reads objects by part number, starting with part 1.
#[tokio::test(flavor = "multi_thread")]
async fn part_one_of_an_empty_object_is_the_empty_object() {
    let env = Env::start().await;
    env.put("empty", b"").await;
    let out = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("empty")
        .part_number(1)
        .send()
        .await
        .unwrap();
    assert_eq!(out.content_length(), Some(0));
    assert_eq!(out.parts_count(), Some(1));
    assert!(out.body.collect().await.unwrap().into_bytes().is_empty());
    let head = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("empty")
        .part_number(1)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(0));
    assert_eq!(head.parts_count(), Some(1));
    let err = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key("empty")
        .part_number(2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(400), "there is no part 2");
    assert_eq!(code(&err).as_deref(), Some("InvalidPart"));
    let err = env
        .client
        .head_object()
        .bucket(BUCKET)
        .key("empty")
        .part_number(2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&err), Some(400), "there is no part 2");
}

/// Keys of one to three segments of printable ASCII (space, `%`, `+`, `?`, `#`, `\` and
/// the rest) and some beyond, without the `.`/`..` segments the gateway refuses.
fn legal_keys() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let char = prop_oneof![
        (0x20u8..0x7f)
            .prop_filter("not a separator", |b| *b != b'/')
            .prop_map(char::from),
        Just('é'),
        Just('日'),
        Just('😀'),
    ];
    let segment = proptest::collection::vec(char, 1..12)
        .prop_map(|c| c.into_iter().collect::<String>())
        .prop_filter("not a dot segment", |s| s != "." && s != "..");
    proptest::collection::vec(segment, 1..4).prop_map(|s| s.join("/"))
}

/// Every such key goes through the gateway and back: PUT, HEAD, GET, a listing of its
/// prefix, DELETE. (Regression: a key of one space was 500 InternalError; keys made only
/// of white space are now refused with 400, since the upstream client cannot send them.)
#[test]
fn keys_of_every_legal_character_round_trip() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let env = rt.block_on(Env::start());
    // `PUT /bucket/%20`, signed by hand (aws-sdk-s3 takes a key of blanks for none, as the
    // gateway's upstream client does): a clear refusal, not a 500.
    let host = env.gateway.addr.to_string();
    let put = crate::auth::signed_payload_put(&host, "%20", b"blank", b"blank");
    let resp = rt.block_on(crate::harness::send_raw(env.gateway.addr, &put));
    assert!(
        resp.starts_with("HTTP/1.1 400") && resp.contains("<Code>InvalidArgument</Code>"),
        "{resp}"
    );
    for key in [" ", "  ", "a ", " a", "%20", "+", "a+b c", "?", "#", "\\"] {
        rt.block_on(round_trip(&env, &format!("fixed/{key}")))
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
    }
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 64,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&legal_keys(), |key| {
            // A prefix of its own per case: a filesystem upstream cannot keep `a` beside `a/b`.
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(round_trip(&env, &format!("case{n}/{key}")))
                .map_err(proptest::test_runner::TestCaseError::fail)
        })
        .unwrap();
}

async fn round_trip(env: &Env, key: &str) -> Result<(), String> {
    let body = key.as_bytes().to_vec();
    env.client
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .map_err(|e| format!("PUT: {e:?}"))?;
    env.client
        .head_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("HEAD: {e:?}"))?;
    let got = env
        .client
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("GET: {e:?}"))?
        .body
        .collect()
        .await
        .map_err(|e| format!("GET body: {e}"))?
        .into_bytes();
    if got != body {
        return Err("GET: other bytes".into());
    }
    let listed = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(key)
        .send()
        .await
        .map_err(|e| format!("LIST: {e:?}"))?;
    if !listed.contents().iter().any(|o| o.key() == Some(key)) {
        return Err(format!("LIST: not listed: {:?}", listed.contents()));
    }
    env.client
        .delete_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("DELETE: {e:?}"))?;
    Ok(())
}

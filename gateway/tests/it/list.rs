//! Listings: V2 pagination with continuation tokens, delimiters (and the empty delimiter
//! rclone and restic send), V1 markers.

use crate::harness::{BUCKET, Env};

#[tokio::test(flavor = "multi_thread")]
async fn v2_paginates_and_groups_by_delimiter() {
    let env = Env::start().await;
    for i in 0..25 {
        env.put(&format!("dir{}/file{i:02}", i % 3), &vec![b'x'; i])
            .await;
    }
    env.put("top", b"t").await;
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let out = env
            .client
            .list_objects_v2()
            .bucket(BUCKET)
            .max_keys(7)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        for o in out.contents() {
            let k = o.key().unwrap().to_string();
            if let Some(i) = k
                .strip_prefix("dir")
                .and_then(|r| r.split_once("/file"))
                .map(|(_, i)| i.parse::<i64>().unwrap())
            {
                assert_eq!(o.size(), Some(i), "size of {k}");
            }
            keys.push(k);
        }
        if !out.is_truncated().unwrap_or(false) {
            break;
        }
        token = out.next_continuation_token().map(str::to_string);
    }
    assert_eq!(keys.len(), 26);
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    let grouped = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = grouped
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, vec!["dir0/", "dir1/", "dir2/"]);
    assert_eq!(grouped.contents().len(), 1);
    let empty_delim = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .delimiter("")
        .send()
        .await
        .unwrap();
    assert_eq!(
        empty_delim.contents().len(),
        26,
        "an empty delimiter lists recursively"
    );
    let under_dir1 = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix("dir1/")
        .send()
        .await
        .unwrap();
    assert_eq!(under_dir1.contents().len(), 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn v1_pages_with_markers() {
    let env = Env::start().await;
    for i in 0..10 {
        env.put(&format!("k{i}"), b"abc").await;
    }
    let mut keys = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let out = env
            .client
            .list_objects()
            .bucket(BUCKET)
            .max_keys(4)
            .set_marker(marker.clone())
            .send()
            .await
            .unwrap();
        keys.extend(out.contents().iter().map(|o| o.key().unwrap().to_string()));
        assert!(out.contents().iter().all(|o| o.size() == Some(3)));
        if !out.is_truncated().unwrap_or(false) {
            break;
        }
        marker = out
            .next_marker()
            .map(str::to_string)
            .or_else(|| keys.last().cloned());
    }
    assert_eq!(keys, (0..10).map(|i| format!("k{i}")).collect::<Vec<_>>());
}

/// Regression: `encoding-type=url` (botocore sends it on every listing) was forwarded, so
/// an upstream that encodes returned encoded keys and the gateway read trailers under the
/// wrong names (reporting stored sizes), while s3s-fs echoed the parameter without
/// encoding, so clients decoded names that were never encoded (`a+b` listed as `a b`).
#[tokio::test(flavor = "multi_thread")]
async fn url_encoded_listings_carry_real_sizes_and_names_that_decode_back() {
    use aws_sdk_s3::types::EncodingType;
    let env = Env::start().await;
    let odd = "dir a/x+y%z é";
    // Parts of 5,300,000 and 7 bytes: not whole segments, so the object has a trailer.
    crate::multipart::put_in_parts(
        &env.client,
        odd,
        &[
            crate::harness::pseudo_random(5_300_000, 1),
            crate::harness::pseudo_random(7, 2),
        ],
    )
    .await;
    crate::harness::put(&env.client, "plain", b"hello").await;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .unwrap()
            .into_owned()
    };

    let v2 = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(v2.encoding_type(), Some(&EncodingType::Url));
    let listed: Vec<(String, Option<i64>)> = v2
        .contents()
        .iter()
        .map(|o| (o.key().unwrap().to_string(), o.size()))
        .collect();
    assert_eq!(
        listed,
        [
            ("dir%20a/x%2By%25z%20%C3%A9".to_string(), Some(5_300_007)),
            ("plain".to_string(), Some(5)),
        ]
    );
    assert_eq!(decode(&listed[0].0), odd);

    let grouped = env
        .client
        .list_objects_v2()
        .bucket(BUCKET)
        .delimiter("/")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(grouped.common_prefixes()[0].prefix(), Some("dir%20a/"));

    let v1 = env
        .client
        .list_objects()
        .bucket(BUCKET)
        .prefix("dir a/")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(v1.prefix(), Some("dir%20a/"));
    assert_eq!(v1.contents()[0].size(), Some(5_300_007));
    assert_eq!(decode(v1.contents()[0].key().unwrap()), odd);

    // Without the parameter, names come back as they are.
    let raw = env.list().await;
    assert_eq!(raw.encoding_type(), None);
    assert_eq!(raw.contents()[0].key(), Some(odd));
    assert_eq!(raw.contents()[0].size(), Some(5_300_007));
}

/// Objects another writer put straight into the upstream are listed with the sizes they
/// are stored with, and the listing succeeds: an empty one (which the upstream cannot
/// serve a header range of), one shorter than any kura object, and one whose stored size
/// is of the class that only a trailer explains (read, found not to be kura's).
#[tokio::test(flavor = "multi_thread")]
async fn objects_not_written_by_kura_list_with_their_stored_sizes() {
    let env = Env::start().await;
    env.put("kura", b"through the gateway").await;
    // One full segment and one byte past it: no final segment is that short.
    let trailer_class = kura_keys::format::HEADER_SIZE + kura_keys::format::FULL_SEGMENT_SIZE + 1;
    let dir = env.upstream.dir.path().join(BUCKET).join("foreign");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, len) in [("empty", 0), ("short", 5), ("trailer-sized", trailer_class)] {
        std::fs::write(dir.join(name), vec![b'f'; len]).unwrap();
    }
    let out = env.list().await;
    let listed: Vec<(&str, Option<i64>)> = out
        .contents()
        .iter()
        .map(|o| (o.key().unwrap(), o.size()))
        .collect();
    assert_eq!(
        listed,
        [
            ("foreign/empty", Some(0)),
            ("foreign/short", Some(5)),
            ("foreign/trailer-sized", Some(trailer_class as i64)),
            ("kura", Some(19)),
        ]
    );
}

/// The upstream GETs the gateway has made so far.
fn upstream_gets(env: &Env) -> u64 {
    kura_testkit::metrics::sum(
        env.gateway.addr.port(),
        "kura_upstream_requests_total{operation=\"GetObject\"}",
    )
}

/// Objects someone planted in the bucket, sized as if they had a trailer, are read once
/// to learn they are not kura's; listing them again costs no reads at all.
#[tokio::test(flavor = "multi_thread")]
async fn planted_objects_cost_their_reads_once_not_on_every_listing() {
    const PLANTED: usize = 200;
    let env = Env::start().await;
    let size = (100_000u64..200_000)
        .find(|n| {
            matches!(
                kura_keys::plaintext_size(*n),
                Ok(kura_keys::SizeInfo::Trailer)
            )
        })
        .unwrap();
    let upstream = env.bucket_writer();
    let body = kura_testkit::data::pseudo_random(usize::try_from(size).unwrap(), 9);
    for i in 0..PLANTED {
        upstream
            .put_object()
            .bucket(BUCKET)
            .key(format!("planted/{i:04}"))
            .body(body.clone().into())
            .send()
            .await
            .unwrap();
    }
    let list = || async {
        let out = env
            .client
            .list_objects_v2()
            .bucket(BUCKET)
            .prefix("planted/")
            .send()
            .await
            .unwrap();
        let contents = out.contents.unwrap_or_default();
        assert_eq!(contents.len(), PLANTED);
        assert!(
            contents
                .iter()
                .all(|o| o.size == Some(i64::try_from(size).unwrap())),
            "planted objects are listed at their stored size"
        );
    };
    list().await;
    let first = upstream_gets(&env);
    assert!(
        first <= 3 * u64::try_from(PLANTED).unwrap(),
        "{first} reads for {PLANTED} planted objects"
    );
    list().await;
    list().await;
    assert_eq!(
        upstream_gets(&env),
        first,
        "listing again read planted objects again"
    );
}

/// What a listing echoes (Prefix, Delimiter, Marker, StartAfter) is what the client sent,
/// encoded once under `encoding-type=url` and not at all without it; an empty `prefix=`
/// is echoed as an empty Prefix, an empty `delimiter=` not at all (as S3 does).
#[tokio::test(flavor = "multi_thread")]
async fn listings_echo_what_the_client_sent_encoded_at_most_once() {
    use aws_sdk_s3::types::EncodingType;
    let env = Env::start().await;
    crate::harness::put(&env.client, "a\nb", b"x").await;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .unwrap()
            .into_owned()
    };
    for url in [false, true] {
        let shown = |s: Option<&str>| s.map(|s| if url { decode(s) } else { s.to_string() });
        let encoding = url.then_some(EncodingType::Url);
        let v1 = env
            .client
            .list_objects()
            .bucket(BUCKET)
            .prefix("\n")
            .marker("\n")
            .delimiter("\n")
            .set_encoding_type(encoding.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(shown(v1.prefix()).as_deref(), Some("\n"), "V1 url={url}");
        assert_eq!(shown(v1.marker()).as_deref(), Some("\n"), "V1 url={url}");
        assert_eq!(shown(v1.delimiter()).as_deref(), Some("\n"), "V1 url={url}");
        let v2 = env
            .client
            .list_objects_v2()
            .bucket(BUCKET)
            .prefix("\n")
            .start_after("\n")
            .delimiter("\n")
            .set_encoding_type(encoding.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(shown(v2.prefix()).as_deref(), Some("\n"), "V2 url={url}");
        assert_eq!(
            shown(v2.start_after()).as_deref(),
            Some("\n"),
            "V2 url={url}"
        );
        assert_eq!(shown(v2.delimiter()).as_deref(), Some("\n"), "V2 url={url}");

        let v1 = env
            .client
            .list_objects()
            .bucket(BUCKET)
            .prefix("")
            .delimiter("")
            .set_encoding_type(encoding.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(v1.prefix(), Some(""), "V1 url={url}");
        assert_eq!(v1.delimiter(), None, "V1 url={url}");
        assert_eq!(v1.contents().len(), 1);
        let v2 = env
            .client
            .list_objects_v2()
            .bucket(BUCKET)
            .prefix("")
            .delimiter("")
            .set_encoding_type(encoding)
            .send()
            .await
            .unwrap();
        assert_eq!(v2.prefix(), Some(""), "V2 url={url}");
        assert_eq!(v2.delimiter(), None, "V2 url={url}");
        assert_eq!(v2.contents().len(), 1);
    }
}

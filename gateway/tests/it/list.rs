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

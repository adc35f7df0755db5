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

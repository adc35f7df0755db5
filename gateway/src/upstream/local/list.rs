//! ListObjectsV2 for the embedded store, walking the bucket's directories in key order and
//! stopping after the page. s3s-fs collects every object of the bucket, sorts them and then
//! cuts out one page, for every page: memory and time that grow with the bucket.
//!
//! Keys are the files' paths below the bucket directory (directories are not objects, as
//! in s3s-fs). Walking a directory's entries sorted by name, with a subdirectory sorted as
//! its name followed by `/`, yields keys in S3's byte order (`a-b` < `a/b` < `a0`).
//! Subtrees that lie wholly before the page's start, outside the prefix, or inside a common
//! prefix already answered are not entered. Memory is the page plus one sorted listing per
//! directory level on the way down. ETags come from s3s-fs's sidecar when it holds one.
//!
//! A folder marker's file (`folder_marker.rs`) is listed as its directory's key (`dir/`),
//! which sorts before everything in the directory, so it sorts as an empty name.

use std::path::{Path, PathBuf};

use s3s::dto::{CommonPrefix, ETag, ListObjectsV2Input, ListObjectsV2Output, Object, Timestamp};
use s3s::{S3Error, S3Result, s3_error};

use super::folder_marker::FOLDER_MARKER;

/// The most keys a page holds, as on S3.
const MAX_KEYS: usize = 1000;

/// One directory's entries in key order, and how far the walk has come through them.
struct Level {
    dir: PathBuf,
    /// The key prefix of the directory's entries: `""` or `a/b/`.
    key_prefix: String,
    /// (name, is a directory), sorted as keys sort.
    entries: Vec<(String, bool)>,
    next: usize,
}

/// What the page has so far.
struct Page {
    contents: Vec<Object>,
    prefixes: Vec<CommonPrefix>,
    last: Option<String>,
    truncated: bool,
}

fn io(e: impl std::fmt::Display) -> S3Error {
    s3_error!(InternalError, "local store: {e}")
}

/// Whether an I/O error means the entry went away meanwhile (a delete removed the file,
/// or the directory it left empty): the walk passes over it, as a listing taken a moment
/// later would.
fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
}

async fn level(dir: PathBuf, key_prefix: String) -> S3Result<Level> {
    let mut entries = Vec::new();
    let mut read = match tokio::fs::read_dir(&dir).await {
        Err(e) if gone(&e) => {
            return Ok(Level {
                dir,
                key_prefix,
                entries,
                next: 0,
            });
        }
        r => r.map_err(io)?,
    };
    while let Some(entry) = read.next_entry().await.map_err(io)? {
        // Names that are not UTF-8 cannot be keys (s3s-fs skips them too).
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let kind = match entry.file_type().await {
            Err(e) if gone(&e) => continue,
            r => r.map_err(io)?,
        };
        if kind.is_dir() || kind.is_file() {
            entries.push((name, kind.is_dir()));
        }
    }
    let top = key_prefix.is_empty();
    // A marker file at the bucket's top would be the key `/`, which the store refuses.
    entries.retain(|(name, is_dir)| !(top && !is_dir && name == FOLDER_MARKER));
    let sort_name = |name: &str, is_dir: bool| {
        let name = if !is_dir && name == FOLDER_MARKER {
            ""
        } else {
            name
        };
        name.bytes()
            .chain(is_dir.then_some(b'/'))
            .collect::<Vec<u8>>()
    };
    entries.sort_by_cached_key(|(name, is_dir)| sort_name(name, *is_dir));
    Ok(Level {
        dir,
        key_prefix,
        entries,
        next: 0,
    })
}

/// The common prefix of `key` under `prefix` and `delimiter`, if it has one.
fn common_prefix<'k>(key: &'k str, prefix: &str, delimiter: Option<&str>) -> Option<&'k str> {
    let d = delimiter.filter(|d| !d.is_empty())?;
    let rest = key.get(prefix.len()..)?;
    let at = rest.find(d)?;
    key.get(..prefix.len() + at + d.len())
}

/// Whether any key of the subtree `sub` (a directory's key prefix, ending in `/`) can be
/// on the page: inside the prefix, after the start, and not inside a common prefix
/// already answered (on this page, or on an earlier one that ended with it).
fn may_hold(
    sub: &str,
    (prefix, delimiter): (&str, Option<&str>),
    after: Option<&str>,
    answered: Option<&str>,
) -> bool {
    let in_prefix = sub.starts_with(prefix) || prefix.starts_with(sub);
    // Every key of the subtree lies in [sub, sub + 1): `after` beyond it skips it all.
    let past = after.is_some_and(|a| a > sub && !a.starts_with(sub));
    let grouped = answered.is_some_and(|cp| sub.starts_with(cp))
        || common_prefix(sub, prefix, delimiter)
            .is_some_and(|cp| sub.starts_with(cp) && after.is_some_and(|a| cp <= a));
    in_prefix && !past && !grouped
}

pub(super) async fn list_objects_v2(
    root: &Path,
    input: ListObjectsV2Input,
) -> S3Result<ListObjectsV2Output> {
    let bucket_dir = root.join(&input.bucket);
    if !bucket_dir.starts_with(root) || !bucket_dir.is_dir() {
        return Err(s3_error!(NoSuchBucket));
    }
    let prefix = input
        .prefix
        .as_deref()
        .unwrap_or("")
        .trim_start_matches('/');
    let delimiter = input.delimiter.as_deref();
    let max_keys = usize::try_from(input.max_keys.unwrap_or(1000))
        .unwrap_or(0)
        .min(MAX_KEYS);
    // A continuation token is the last key or common prefix of the previous page.
    let after = match (
        input.continuation_token.as_deref(),
        input.start_after.as_deref(),
    ) {
        (Some(t), Some(s)) => Some(t.max(s)),
        (t, s) => t.or(s),
    };
    let mut page = Page {
        contents: Vec::new(),
        prefixes: Vec::new(),
        last: None,
        truncated: false,
    };
    let mut stack = vec![level(bucket_dir, String::new()).await?];
    'walk: while let Some(top) = stack.last_mut() {
        let Some((name, is_dir)) = top.entries.get(top.next).cloned() else {
            stack.pop();
            continue;
        };
        top.next += 1;
        let stored = format!("{}{name}", top.key_prefix);
        let key = super::folder_marker::client(&stored).to_string();
        let path = top.dir.join(&name);
        let answered = page.prefixes.last().and_then(|p| p.prefix.as_deref());
        if is_dir {
            let sub = format!("{stored}/");
            if may_hold(&sub, (prefix, delimiter), after, answered) {
                stack.push(level(path, sub).await?);
            }
            continue;
        }
        if !key.starts_with(prefix) || after.is_some_and(|a| key.as_str() <= a) {
            continue;
        }
        let group = common_prefix(&key, prefix, delimiter);
        if let Some(cp) = group
            && (answered == Some(cp) || after.is_some_and(|a| cp <= a))
        {
            continue;
        }
        if page.contents.len() + page.prefixes.len() == max_keys {
            // One more item exists: the page is full, and there is a next one.
            page.truncated = max_keys > 0;
            break 'walk;
        }
        if let Some(cp) = group {
            page.last = Some(cp.to_string());
            page.prefixes.push(CommonPrefix {
                prefix: Some(cp.to_string()),
            });
            continue;
        }
        let meta = match tokio::fs::metadata(&path).await {
            Err(e) if gone(&e) => continue,
            r => r.map_err(io)?,
        };
        page.last = Some(key.clone());
        page.contents.push(Object {
            e_tag: stored_etag(root, &input.bucket, &stored)
                .await
                .map(ETag::Strong),
            last_modified: meta.modified().ok().map(Timestamp::from),
            size: i64::try_from(meta.len()).ok(),
            key: Some(key),
            ..Default::default()
        });
    }
    let key_count = page.contents.len() + page.prefixes.len();
    Ok(ListObjectsV2Output {
        key_count: i32::try_from(key_count).ok(),
        max_keys: input.max_keys,
        is_truncated: Some(page.truncated),
        next_continuation_token: page.truncated.then_some(page.last).flatten(),
        contents: (!page.contents.is_empty()).then_some(page.contents),
        common_prefixes: (!page.prefixes.is_empty()).then_some(page.prefixes),
        continuation_token: input.continuation_token,
        delimiter: input.delimiter,
        name: Some(input.bucket),
        prefix: input.prefix,
        start_after: input.start_after,
        ..Default::default()
    })
}

/// The ETag s3s-fs keeps in an object's `internal` sidecar, if it keeps one.
async fn stored_etag(root: &Path, bucket: &str, key: &str) -> Option<String> {
    let text = tokio::fs::read(super::put::sidecar(root, bucket, key, "internal"))
        .await
        .ok()?;
    let info: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&text).ok()?;
    info.get("e_tag")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefixes_end_at_the_first_delimiter_after_the_prefix() {
        assert_eq!(common_prefix("a/b/c", "", Some("/")), Some("a/"));
        assert_eq!(common_prefix("a/b/c", "a/", Some("/")), Some("a/b/"));
        assert_eq!(common_prefix("a/b", "a/", Some("/")), None);
        assert_eq!(common_prefix("a-b", "", Some("-")), Some("a-"));
        assert_eq!(common_prefix("a/b", "", None), None);
    }

    /// A directory that a delete removed after its parent was read is an empty level,
    /// as a listing taken a moment later would see, not an error.
    #[tokio::test]
    async fn a_directory_gone_mid_walk_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let gone = level(dir.path().join("removed"), "removed/".into()).await;
        assert!(gone.unwrap().entries.is_empty());
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/-k"), b"k").unwrap();
        std::fs::write(dir.path().join("d/.kura-folder-marker"), b"m").unwrap();
        let here = level(dir.path().join("d"), "d/".into()).await.unwrap();
        let names: Vec<&str> = here.entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [".kura-folder-marker", "-k"], "the marker first");
    }

    #[test]
    fn subtrees_off_the_page_are_not_entered() {
        let all = ("", None);
        assert!(may_hold("a/", all, None, None));
        assert!(!may_hold("a/", ("b", None), None, None));
        assert!(may_hold("a/", ("a/b", None), None, None));
        assert!(
            !may_hold("a/", all, Some("a0"), None),
            "all of a/ sorts before a0"
        );
        assert!(may_hold("a/", all, Some("a/x"), None));
        assert!(!may_hold("a/b/", all, None, Some("a/")));
        // The previous page ended with the common prefix a/: nothing below it is listed.
        assert!(!may_hold("a/b/", ("", Some("/")), Some("a/"), None));
        assert!(may_hold("a/b/", ("a/", Some("/")), Some("a/"), None));
    }
}

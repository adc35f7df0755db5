//! What the embedded store checks before it hands a call to s3s-fs, whose own checks come
//! after it has changed files, and the tidying after its deletes.
//!
//! - Keys: s3s-fs maps a key to a path, so `a//b` is the file of `a/b` (with sidecars of
//!   its own), and a name longer than the filesystem takes fails half-way. Keys it cannot
//!   hold faithfully are refused before anything is written.
//! - Completions: s3s-fs drops the upload and moves its attributes onto the object before
//!   it checks the part list; a gap in the numbering or a short middle part then leaves the
//!   object with another object's attributes and the upload gone. The list is checked
//!   first.
//! - Deletes leave the directories of a key behind, and a later PUT of a key that names one
//!   of them cannot be stored; empty ones are removed.
//! - A key cannot be both a file and a directory: `a` and `a/b` (or `a/`, a folder marker)
//!   exclude each other. A write of the second is refused up front with a message that
//!   names the first, where the filesystem's error became a 500 that clients retry.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use s3s::dto::CompleteMultipartUploadInput;
use s3s::{S3Error, S3Result, s3_error};

/// The longest file name the filesystems kura runs on take (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// s3s-fs's smallest part but the last, which it checks only after it has copied parts.
const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// Refuses a key the store cannot keep as its own file with its own sidecars: one with an
/// empty path segment, a segment longer than a file name may be, or one whose sidecar name
/// (`.bucket-B.object-K[.upload-UUID].metadata.json`, base64 names) would be too long.
/// `upload` asks for the longer name a multipart upload's attributes get.
pub(super) fn storable_key(bucket: &str, key: &str, upload: bool) -> S3Result<()> {
    if key.contains("//") {
        return Err(s3_error!(
            InvalidArgument,
            "the embedded store cannot keep keys with an empty path segment (`//`)"
        ));
    }
    if key.split('/').any(|s| s == "." || s == "..") {
        // `a/./` would be the file of `a/`, `./` a marker at the bucket's top.
        return Err(s3_error!(
            InvalidArgument,
            "the embedded store cannot keep keys with `.` or `..` segments"
        ));
    }
    let b64 = |s: &str| URL_SAFE_NO_PAD.encode(s).len();
    let upload_part = if upload { ".upload-".len() + 36 } else { 0 };
    let sidecar = ".bucket-".len()
        + b64(bucket)
        + ".object-".len()
        + b64(key)
        + upload_part
        + ".metadata.json".len();
    if sidecar > NAME_MAX || key.split('/').any(|s| s.len() > NAME_MAX) {
        return Err(s3_error!(
            KeyTooLongError,
            "the embedded store keeps keys of up to about {} bytes in this bucket",
            (NAME_MAX - (sidecar - b64(key))) * 3 / 4
        ));
    }
    Ok(())
}

/// Why a key's file cannot go where it belongs.
pub(super) enum Blocked {
    /// An object's file, or a directory with other keys in it, lies there.
    Taken(S3Error),
    /// An empty directory lies there: one a delete could not tidy away while writes ran.
    EmptyDirectory(PathBuf),
}

impl Blocked {
    /// The client's answer when the way stays blocked: an empty directory goes away once
    /// no write runs (the next delete or write tidies it), so that one is worth a retry.
    pub(super) fn into_error(self) -> S3Error {
        match self {
            Blocked::Taken(e) => e,
            Blocked::EmptyDirectory(_) => s3_error!(
                SlowDown,
                "an empty directory of the store lies where this key's file goes; retry"
            ),
        }
    }
}

/// Refuses to write the stored key `key` where its file cannot go: an object's file lies on
/// its path (`a` for `a/b`), or its path is a directory of other keys (`a` when `a/b` or
/// `a/` exists). A write racing the check can still meet the filesystem's error.
pub(super) async fn placeable(root: &Path, bucket: &str, key: &str) -> Result<(), Blocked> {
    let mut at = root.join(bucket);
    let segments: Vec<&str> = key.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        at.push(segment);
        // Not following links: a link is neither the store's directory nor its object.
        let Ok(meta) = tokio::fs::symlink_metadata(&at).await else {
            // Nothing there yet: the rest of the path is made by the write.
            return Ok(());
        };
        let last = i + 1 == segments.len();
        if !last && !meta.is_dir() {
            let object = segments[..=i].join("/");
            return Err(Blocked::Taken(s3_error!(
                InvalidArgument,
                "the embedded store keeps each key as a file, and the object `{object}` lies where the directory of this key would go"
            )));
        }
        if last && meta.is_dir() {
            if empty_tree(&at).await.is_some() {
                return Err(Blocked::EmptyDirectory(at));
            }
            return Err(Blocked::Taken(s3_error!(
                InvalidArgument,
                "the embedded store keeps each key as a file, and objects below `{}/` lie where this key's file would go",
                segments.join("/")
            )));
        }
    }
    Ok(())
}

/// The most entries [`empty_tree`] looks at before it calls a directory occupied.
const EMPTY_TREE_LIMIT: usize = 64;

/// If `dir` holds directories only, with no file anywhere below (what deletes leave when
/// they cannot tidy), those directories, each before the ones inside it. `None` when it
/// holds anything else, or more than [`EMPTY_TREE_LIMIT`] entries.
async fn empty_tree(dir: &Path) -> Option<Vec<PathBuf>> {
    let mut found = vec![dir.to_path_buf()];
    let mut next = 0;
    while let Some(d) = found.get(next).cloned() {
        next += 1;
        let mut entries = tokio::fs::read_dir(&d).await.ok()?;
        while let Some(entry) = entries.next_entry().await.ok()? {
            // A link or a file is something; only directories may be emptied away.
            if found.len() > EMPTY_TREE_LIMIT || !entry.file_type().await.ok()?.is_dir() {
                return None;
            }
            found.push(entry.path());
        }
    }
    Some(found)
}

/// Removes `dir` and the empty directories below it, deepest first. A directory that has
/// gained an entry meanwhile stays, and so do the ones above it.
pub(super) async fn remove_empty_tree(dir: &Path) {
    let Some(dirs) = empty_tree(dir).await else {
        return;
    };
    for d in dirs.iter().rev() {
        let _ = tokio::fs::remove_dir(d).await;
    }
}

/// Checks a completion's part list the way s3s-fs will, before it changes anything: parts
/// numbered 1, 2, 3, ..., each uploaded, and each but the last at least 5 MiB.
pub(super) async fn completable(root: &Path, input: &CompleteMultipartUploadInput) -> S3Result<()> {
    let parts = input
        .multipart_upload
        .as_ref()
        .and_then(|m| m.parts.as_deref())
        .unwrap_or_default();
    if !input
        .upload_id
        .bytes()
        .all(|b| b.is_ascii_hexdigit() || b == b'-')
    {
        // Not one of s3s-fs's IDs (UUIDs); s3s-fs refuses it before changing anything.
        return Ok(());
    }
    let count = parts.len();
    for (i, part) in parts.iter().enumerate() {
        let want = i32::try_from(i + 1).unwrap_or(i32::MAX);
        let number = part.part_number.unwrap_or(0);
        if number != want {
            return Err(s3_error!(
                InvalidPart,
                "the embedded store completes parts numbered 1, 2, 3, ... with none left out; part {want} is not in the list"
            ));
        }
        let path = root.join(format!(".upload_id-{}.part-{number}", input.upload_id));
        let size = tokio::fs::metadata(&path)
            .await
            .map_err(|_| s3_error!(InvalidPart, "part {number} was not uploaded"))?
            .len();
        if i + 1 < count && size < MIN_PART_SIZE {
            return Err(s3_error!(
                EntityTooSmall,
                "part {number} is smaller than 5 MiB and not the last"
            ));
        }
    }
    Ok(())
}

/// Removes the directories of `key` that its delete left empty, up to the bucket's.
pub(super) async fn remove_empty_parents(root: &Path, bucket: &str, key: &str) {
    let top = root.join(bucket);
    let mut dir = top.join(key);
    while dir.pop() && dir.starts_with(&top) && dir != top {
        // Fails, and stops the walk, at the first directory that still holds something.
        if tokio::fs::remove_dir(&dir).await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_the_store_cannot_keep_are_refused() {
        assert!(storable_key("b", "a/b/c", true).is_ok());
        assert!(storable_key("b", "a//b", false).is_err());
        assert!(storable_key("b", "a/./.kura-folder-marker", false).is_err());
        assert!(storable_key("b", "../b/x", false).is_err());
        assert!(storable_key("b", "a/.x/..y", false).is_ok());
        assert!(storable_key("b", &"k".repeat(150), false).is_ok());
        assert!(storable_key("b", &"k".repeat(180), false).is_err());
        // The upload's sidecar name is longer.
        assert!(storable_key("b", &"k".repeat(150), true).is_err());
        assert!(storable_key("b", &format!("{}/x", "s".repeat(256)), false).is_err());
    }
}

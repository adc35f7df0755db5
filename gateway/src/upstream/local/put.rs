//! PutObject for the embedded default's store, written here rather than by s3s-fs.
//!
//! s3s-fs hashes every byte it stores with MD5 for its ETag: in a profile of a first
//! `kura backup` through the embedded default, 28% of the gateway's CPU. This writer
//! stores the object and its two sidecar files in s3s-fs's layout (so that s3s-fs keeps
//! serving HEAD, listings, copies and deletes of it) with a random ETag instead: an entity
//! tag only has to change when the object does, and the gateway never shows an upstream
//! ETag as an MD5 (the `-0` suffix, `README.md`). Its conditions (If-Match,
//! If-None-Match) are checked under the key's mutex just before the object is put in place,
//! so the body streams in without holding the lock. Requests that need more (a Content-MD5,
//! checksums) still go to s3s-fs.
//!
//! A stored object is durable before the 200 (its body, sidecars and directories are
//! synced), a body that is broken off leaves no temporary file, and the final renames run
//! to the end even if the client goes away meanwhile. What s3s-fs writes for the other
//! writes (completions, copies, parts, PutObjects with a Content-MD5) is synced here too
//! ([`sync_written`], [`sync_part`]) before their 200.
//!
//! The layout is s3s-fs 0.14.1's (`fs.rs`: `get_object_path`, `get_metadata_path`,
//! `get_internal_info_path`), which is why `Cargo.toml` pins that exact version.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::StreamExt as _;
use std::sync::Arc;

use s3s::dto::{ETag, ETagCondition, HeadObjectInput, PutObjectInput, PutObjectOutput};
use s3s::{S3, S3Error, S3ErrorCode, S3Result, s3_error};

use super::checks::Blocked;
use serde::Serialize;
use tokio::io::AsyncWriteExt as _;

/// Writes reach the file in pieces of this size (one blocking-pool hop each).
const WRITE_BUFFER: usize = 1 << 20;

/// Whether `input` is a plain PutObject this writer handles.
pub(super) fn handles(input: &PutObjectInput) -> bool {
    input.content_md5.is_none()
        && input.checksum_algorithm.is_none()
        && input.checksum_crc32.is_none()
        && input.checksum_crc32c.is_none()
        && input.checksum_crc64nvme.is_none()
        && input.checksum_sha1.is_none()
        && input.checksum_sha256.is_none()
}

/// s3s-fs's `ObjectAttributes`, as it serializes them.
#[derive(Serialize)]
struct Attributes<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    user_metadata: Option<&'a HashMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_encoding: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_disposition: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_language: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    website_redirect_location: Option<&'a str>,
}

/// The object's sidecar names, as s3s-fs derives them.
pub(super) fn sidecar(root: &Path, bucket: &str, key: &str, what: &str) -> PathBuf {
    root.join(format!(
        ".bucket-{}.object-{}.{what}.json",
        URL_SAFE_NO_PAD.encode(bucket),
        URL_SAFE_NO_PAD.encode(key)
    ))
}

/// Removes an object's sidecars after a delete (s3s-fs leaves them; a later object of the
/// same name written by a path that sets no attributes would inherit them).
pub(super) async fn remove_sidecars(root: &Path, bucket: &str, key: &str) {
    for what in ["metadata", "internal"] {
        let _ = tokio::fs::remove_file(sidecar(root, bucket, key, what)).await;
    }
}

fn internal(e: impl std::fmt::Display) -> S3Error {
    s3_error!(InternalError, "local store: {e}")
}

/// Stores `input` under `root`: the body into a temporary file, then the attributes and
/// the ETag, then the body renamed into place (a failed body leaves nothing).
pub(super) async fn put(
    root: &Path,
    (mutexes, dirs): (&super::key_mutex::KeyMutexes, &Arc<tokio::sync::RwLock<()>>),
    fs: &Arc<s3s_fs::FileSystem>,
    input: PutObjectInput,
) -> S3Result<PutObjectOutput> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    if let Some(class) = &input.storage_class
        && !["STANDARD", "REDUCED_REDUNDANCY"].contains(&class.as_str())
    {
        // The store has one class; s3s-fs refuses the others the same way.
        return Err(s3_error!(InvalidStorageClass));
    }
    let object = root.join(&input.bucket).join(&input.key);
    if !object.starts_with(root) || input.key.split('/').any(|c| c == "..") {
        return Err(s3_error!(InvalidArgument, "key escapes the bucket"));
    }
    if !root.join(&input.bucket).is_dir() {
        return Err(s3_error!(NoSuchBucket));
    }
    let Some(mut body) = input.body else {
        return Err(s3_error!(IncompleteBody));
    };
    // Named so that s3s-fs's start-up sweep (`.tmp.*.internal.part`) removes what a crash
    // left, and unlike its own names (a plain counter).
    let unique = format!(
        "kura-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let tmp = Scratch(Some(root.join(format!(".tmp.{unique}.internal.part"))));
    receive(&tmp, &mut body, input.content_length).await?;
    let attributes = Attributes {
        user_metadata: input.metadata.as_ref(),
        content_encoding: input.content_encoding.as_deref(),
        content_type: input.content_type.as_ref().map(ToString::to_string),
        content_disposition: input.content_disposition.as_deref(),
        content_language: input.content_language.as_deref(),
        cache_control: input.cache_control.as_deref(),
        expires: input.expires.as_ref().and_then(|t| {
            let mut buf = Vec::new();
            t.format(s3s::dto::TimestampFormat::DateTime, &mut buf)
                .ok()?;
            String::from_utf8(buf).ok()
        }),
        website_redirect_location: input.website_redirect_location.as_deref(),
    };
    let etag = random_etag()?;
    let mut info = serde_json::Map::new();
    info.insert("e_tag".into(), serde_json::Value::String(etag.clone()));
    let placing = Placing {
        root: root.to_path_buf(),
        object,
        sidecars: [
            (
                sidecar(root, &input.bucket, &input.key, "metadata"),
                serde_json::to_vec(&attributes).map_err(internal)?,
            ),
            (
                sidecar(root, &input.bucket, &input.key, "internal"),
                serde_json::to_vec(&info).map_err(internal)?,
            ),
        ],
        unique,
        body: tmp,
    };
    // Sidecars and body are replaced under the key's mutex (`key_mutex.rs`); the body was
    // received without it. The placing runs as a task of its own: a client that goes away
    // now must not stop it between the sidecars and the body, which would leave the old
    // body beside the new sidecars.
    let conditions = Conditions {
        fs: fs.clone(),
        bucket: input.bucket.clone(),
        key: input.key.clone(),
        if_match: input.if_match,
        if_none_match: input.if_none_match,
    };
    let key_guard = mutexes.lock_owned(&input.bucket, &input.key).await;
    let dirs = dirs.clone();
    let root = root.to_path_buf();
    tokio::spawn(async move {
        let _key_guard = key_guard;
        conditions.hold().await?;
        let _dirs = dirs.read_owned().await;
        // Checked before the body came too; another key's file may have taken the path since.
        super::checks::placeable(&root, &conditions.bucket, &conditions.key)
            .await
            .map_err(Blocked::into_error)?;
        placing.place().await.map_err(internal)
    })
    .await
    .map_err(internal)??;
    Ok(PutObjectOutput {
        e_tag: Some(ETag::Strong(etag)),
        ..Default::default()
    })
}

/// Writes `body` into `tmp` and syncs it. On an error, or a client that went away
/// mid-body (the future dropped), `tmp`'s guard removes the file.
async fn receive(
    tmp: &Scratch,
    body: &mut s3s::dto::StreamingBlob,
    content_length: Option<i64>,
) -> S3Result<()> {
    let file = tokio::fs::File::create(tmp.path())
        .await
        .map_err(internal)?;
    let mut out = tokio::io::BufWriter::with_capacity(WRITE_BUFFER, file);
    let mut size = 0u64;
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|e| s3_error!(IncompleteBody, "{e}"))?;
        size += piece.len() as u64;
        out.write_all(&piece).await.map_err(internal)?;
    }
    out.flush().await.map_err(internal)?;
    if content_length.is_some_and(|n| u64::try_from(n) != Ok(size)) {
        return Err(s3_error!(
            IncompleteBody,
            "body length differs from Content-Length"
        ));
    }
    // A 200 promises the object: it must survive a power loss.
    out.get_ref().sync_all().await.map_err(internal)
}

/// A PUT's conditions, checked against the object in place under the key's mutex.
struct Conditions {
    fs: Arc<s3s_fs::FileSystem>,
    bucket: String,
    key: String,
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
}

/// The ETag of the object the store holds at `bucket`/`key`, as s3s-fs's HEAD gives it
/// (its sidecar's, else the body's MD5); NoSuchKey when there is none.
pub(super) async fn current_etag(
    fs: &s3s_fs::FileSystem,
    bucket: &str,
    key: &str,
) -> S3Result<Option<ETag>> {
    let head = HeadObjectInput {
        bucket: bucket.into(),
        key: key.into(),
        ..Default::default()
    };
    Ok(fs
        .head_object(crate::upstream::request(head))
        .await?
        .output
        .e_tag)
}

impl Conditions {
    async fn hold(&self) -> S3Result<()> {
        if self.if_match.is_none() && self.if_none_match.is_none() {
            return Ok(());
        }
        let current = match current_etag(&self.fs, &self.bucket, &self.key).await {
            Ok(e) => Some(e),
            Err(e) if *e.code() == S3ErrorCode::NoSuchKey => None,
            Err(e) => return Err(e),
        };
        let matches = |c: &ETagCondition| match (c, &current) {
            (_, None) => false,
            (ETagCondition::Any, Some(_)) => true,
            (ETagCondition::ETag(want), Some(have)) => {
                have.as_ref().map(ETag::value) == Some(want.value())
            }
        };
        let refused = self.if_match.as_ref().is_some_and(|c| !matches(c))
            || self.if_none_match.as_ref().is_some_and(matches);
        if refused {
            return Err(s3_error!(PreconditionFailed));
        }
        Ok(())
    }
}

/// A temporary file in the store's root, removed when dropped unless it was placed.
struct Scratch(Option<PathBuf>);

impl Scratch {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or_else(|| Path::new(""))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            // Blocking, but one unlink, and only when a write did not complete.
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A received body and its sidecars, ready to be put in place.
struct Placing {
    root: PathBuf,
    object: PathBuf,
    sidecars: [(PathBuf, Vec<u8>); 2],
    unique: String,
    body: Scratch,
}

impl Placing {
    /// The sidecars go in before the object: a crash in between leaves sidecars of an
    /// object that is not there (a 404, as before the PUT) rather than an object without
    /// its attributes. (An overwrite killed in between leaves the old body with the new
    /// sidecars: a crash of the store's own process, which real S3 does not have.)
    async fn place(mut self) -> std::io::Result<()> {
        for (i, (path, json)) in self.sidecars.iter().enumerate() {
            let mut side_tmp = Scratch(Some(
                self.root
                    .join(format!(".tmp.{}-{i}.internal.part", self.unique)),
            ));
            let mut f = tokio::fs::File::create(side_tmp.path()).await?;
            f.write_all(json).await?;
            f.sync_all().await?;
            tokio::fs::rename(side_tmp.path(), path).await?;
            side_tmp.0 = None;
        }
        // A delete of another key may remove the directory, once empty, between the two
        // steps (`checks.rs`); then it is made again.
        let mut attempts = 0;
        loop {
            if let Some(dir) = self.object.parent() {
                tokio::fs::create_dir_all(dir).await?;
            }
            match tokio::fs::rename(self.body.path(), &self.object).await {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 3 => {
                    attempts += 1;
                }
                done => break done?,
            }
        }
        self.body.0 = None;
        sync_dirs(&self.root, &self.object).await
    }
}

/// Makes the renames that put `path` (under `root`) and the sidecars in place durable:
/// syncs every directory from `path`'s up to the root (the sidecars' directory), any of
/// which `create_dir_all` may have made.
async fn sync_dirs(root: &Path, path: &Path) -> std::io::Result<()> {
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(root)) {
        tokio::fs::File::open(d).await?.sync_all().await?;
        dir = d.parent();
    }
    Ok(())
}

/// Makes an object that s3s-fs wrote (a completion, a copy, a PutObject with a
/// Content-MD5) durable before its 200 is sent, as [`put`] does for its own: s3s-fs
/// renames its files into place without syncing anything, and its completion has deleted
/// the parts by then, so a crash could lose an object the client was told is stored.
pub(super) async fn sync_written(root: &Path, bucket: &str, key: &str) -> S3Result<()> {
    let object = root.join(bucket).join(key);
    sync_file(&object).await.map_err(internal)?;
    for what in ["metadata", "internal"] {
        // s3s-fs writes the attributes sidecar only for objects that have attributes.
        match sync_file(&sidecar(root, bucket, key, what)).await {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => r.map_err(internal)?,
        }
    }
    sync_dirs(root, &object).await.map_err(internal)
}

/// Makes a part that s3s-fs stored durable before its 200: the completion reads it back.
pub(super) async fn sync_part(root: &Path, upload_id: &str, part: i32) -> S3Result<()> {
    // s3s-fs 0.14.1's `resolve_upload_part_path`.
    let path = root.join(format!(".upload_id-{upload_id}.part-{part}"));
    sync_file(&path).await.map_err(internal)?;
    sync_dirs(root, &path).await.map_err(internal)
}

async fn sync_file(path: &Path) -> std::io::Result<()> {
    tokio::fs::File::open(path).await?.sync_all().await
}

/// 128 random bits in hex: unique per write, like an MD5 in shape only.
fn random_etag() -> S3Result<String> {
    let mut b = [0u8; 16];
    kura_keys::rand::fill(&mut b)
        .map_err(|_| s3_error!(InternalError, "no randomness for an ETag"))?;
    Ok(hex::encode(b))
}

//! The embedded default's store: a local directory in s3s-fs's layout, called in-process.
//!
//! s3s-fs serves reads in 4 KiB pieces, each a blocking-pool round trip (about 80 MB/s
//! on a 2-core test machine), and hashes every stored byte with MD5; either
//! would make the embedded default's upstream the bottleneck. This wrapper answers
//! GetObject itself from the same files with 1 MiB reads, writes plain PutObjects itself
//! (`put.rs`), and hands every other call to s3s-fs, with these fixes:
//!
//! - s3s-fs answers HeadObject and DeleteObject of a key that names a directory (the key
//!   `a` when `a/b` exists) with 500 InternalError after reading the directory as a file;
//!   S3 answers 404 and 204. rclone HEADs its destination path before every copy, so the
//!   500s (retried by rclone and the gateway alike) cost it minutes.
//! - s3s-fs leaves an object's sidecar files (attributes, ETag) behind when it deletes
//!   the object; they are removed after the delete, and so are the key's directories that
//!   the delete left empty.
//! - Keys it cannot keep as files of their own (`a//b`, names too long for the
//!   filesystem, `a/b` while `a` is an object) and completions whose part list it would
//!   refuse half-way are refused before s3s-fs changes anything (`checks.rs`).
//! - A DeleteObject's If-Match, DeleteObjects' per-key ETags and a copy's
//!   `x-amz-copy-source-if-match`, which s3s-fs ignores, are checked; DeleteObjects answers
//!   keys without a file of their own itself (s3s-fs fails the whole batch on them).
//! - DeleteBucket of a bucket with objects is 409 BucketNotEmpty, where s3s-fs removes the
//!   directory with everything in it.
//! - ListObjectsV2 walks the bucket in key order and stops after the page
//!   (`list.rs`), where s3s-fs reads and sorts the whole bucket for every page.
//! - Folder markers (`dir/`), which s3s-fs keeps as bare directories that can hold no
//!   body, are files inside their directory (`folder_marker.rs`): every call's keys are turned
//!   into the stored form first, and every answer's back.
//! - s3s-fs syncs nothing it writes; what it wrote for a write is synced before the
//!   answer (`put::sync_written`, `put::sync_part`).

#![allow(clippy::wildcard_imports, reason = "the S3 DTO namespace")]

mod checks;
mod folder_marker;
mod key_mutex;
mod list;
mod put;

use std::io::SeekFrom;
use std::path::PathBuf;

use futures::TryStreamExt as _;
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use self::checks::{
    Blocked, completable, placeable, remove_empty_parents, remove_empty_tree, storable_key,
};
use self::folder_marker::{client_key, store_key, store_read_key};
use self::put::{sync_part, sync_written};
use super::request;
use crate::error::LocalDirError;

const READ_CHUNK: usize = 1 << 20;

/// How long a write waits for the store's directories to be its own to remove empty ones
/// in its way (`LocalDir::clear_way`).
const CLEAR_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// s3s-fs with a fast object reader.
pub struct LocalDir {
    fs: std::sync::Arc<s3s_fs::FileSystem>,
    root: PathBuf,
    mutexes: key_mutex::KeyMutexes,
    /// Held to read by every write that makes a key's directories and then renames into
    /// them, and to write while a delete removes directories it left empty: a removal in
    /// between would make the rename fail, and s3s-fs's completion has deleted the parts
    /// by then. Taken after any key mutex, never before.
    dirs: std::sync::Arc<tokio::sync::RwLock<()>>,
}

impl LocalDir {
    /// Serves `root` (created by the caller).
    ///
    /// # Errors
    /// [`LocalDirError`] when s3s-fs cannot open the directory.
    pub fn new(root: &std::path::Path) -> Result<Self, LocalDirError> {
        let fs =
            s3s_fs::FileSystem::new(root).map_err(|e| LocalDirError::Open(format!("{e:?}")))?;
        let root = root.canonicalize().map_err(LocalDirError::Canonicalize)?;
        Ok(Self {
            fs: std::sync::Arc::new(fs),
            root,
            mutexes: key_mutex::KeyMutexes::new(),
            dirs: std::sync::Arc::default(),
        })
    }
}

macro_rules! store {
    ($($name:ident: $input:ty => $output:ty;)*) => {
        #[async_trait::async_trait]
        impl S3 for LocalDir {
            $(
                async fn $name(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    self.fs.$name(req).await
                }
            )*

            async fn put_object(&self, mut req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
                store_key(&mut req.input.key)?;
                storable_key(&req.input.bucket, &req.input.key, false)?;
                self.clear_way(&req.input.bucket, &req.input.key).await?;
                if req.trailing_headers.is_none() && put::handles(&req.input) {
                    return put::put(&self.root, (&self.mutexes, &self.dirs), &self.fs, req.input).await.map(S3Response::new);
                }
                let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
                let _key = self.mutexes.lock(&bucket, &key).await;
                let _dirs = self.dirs.read().await;
                let out = self.fs.put_object(req).await?;
                sync_written(&self.root, &bucket, &key).await?;
                Ok(out)
            }

            async fn get_object(&self, mut req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
                // A reserved key is never stored: not there, as its delete answers.
                store_read_key(&mut req.input.key)?;
                self.read(req).await
            }

            async fn head_object(&self, mut req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
                store_read_key(&mut req.input.key)?;
                if self.names_directory(&req.input.bucket, &req.input.key).await {
                    return Err(s3_error!(NoSuchKey));
                }
                let _key = self.mutexes.lock(&req.input.bucket, &req.input.key).await;
                self.fs.head_object(req).await
            }

            async fn delete_object(&self, mut req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
                // A key the store cannot keep (`a//b`, whose file would be `a/b`'s) is not
                // there to delete: 204, as S3 answers for a missing key, and nothing touched.
                if store_key(&mut req.input.key).is_err()
                    || storable_key(&req.input.bucket, &req.input.key, false).is_err()
                    || self.names_directory(&req.input.bucket, &req.input.key).await
                {
                    return Ok(S3Response::new(DeleteObjectOutput::default()));
                }
                let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
                let _key = self.mutexes.lock(&bucket, &key).await;
                self.etag_holds((&bucket, &key), req.input.if_match.as_ref(), "the object changed").await?;
                let out = self.fs.delete_object(req).await?;
                put::remove_sidecars(&self.root, &bucket, &key).await;
                self.tidy(&bucket, std::slice::from_ref(&key)).await;
                Ok(out)
            }

            async fn delete_objects(&self, req: S3Request<DeleteObjectsInput>) -> S3Result<S3Response<DeleteObjectsOutput>> {
                self.delete_batch(req).await
            }

            async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
                list::list_objects_v2(&self.root, req.input).await.map(S3Response::new)
            }

            async fn copy_object(&self, mut req: S3Request<CopyObjectInput>) -> S3Result<S3Response<CopyObjectOutput>> {
                store_key(&mut req.input.key)?;
                store_source_key(&mut req.input.copy_source)?;
                storable_key(&req.input.bucket, &req.input.key, false)?;
                self.clear_way(&req.input.bucket, &req.input.key).await?;
                let source = copy_source(&req.input.copy_source)?;
                let _keys = self.mutexes.lock_objects([source, (&req.input.bucket, &req.input.key)]).await;
                self.etag_holds(source, req.input.copy_source_if_match.as_ref(), "the copy source changed").await?;
                let _dirs = self.dirs.read().await;
                let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
                let out = self.fs.copy_object(req).await?;
                sync_written(&self.root, &bucket, &key).await?;
                Ok(out)
            }

            async fn upload_part_copy(&self, mut req: S3Request<UploadPartCopyInput>) -> S3Result<S3Response<UploadPartCopyOutput>> {
                store_key(&mut req.input.key)?;
                store_source_key(&mut req.input.copy_source)?;
                let source = copy_source(&req.input.copy_source)?;
                let _key = self.mutexes.lock(source.0, source.1).await;
                self.etag_holds(source, req.input.copy_source_if_match.as_ref(), "the copy source changed").await?;
                let (id, part) = (req.input.upload_id.clone(), req.input.part_number);
                let out = self.fs.upload_part_copy(req).await?;
                sync_part(&self.root, &id, part).await?;
                Ok(out)
            }

            async fn create_multipart_upload(&self, mut req: S3Request<CreateMultipartUploadInput>) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
                store_key(&mut req.input.key)?;
                storable_key(&req.input.bucket, &req.input.key, true)?;
                self.clear_way(&req.input.bucket, &req.input.key).await?;
                let mut out = self.fs.create_multipart_upload(req).await?;
                client_key(&mut out.output.key);
                Ok(out)
            }

            async fn complete_multipart_upload(&self, mut req: S3Request<CompleteMultipartUploadInput>) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
                store_key(&mut req.input.key)?;
                completable(&self.root, &req.input).await?;
                self.clear_way(&req.input.bucket, &req.input.key).await?;
                let _key = self.mutexes.lock(&req.input.bucket, &req.input.key).await;
                let _dirs = self.dirs.read().await;
                let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
                let mut out = self.fs.complete_multipart_upload(req).await?;
                // s3s-fs has written the object by now; `future` only carries the answer.
                sync_written(&self.root, &bucket, &key).await?;
                client_key(&mut out.output.key);
                // s3s-fs answers through `future` (for keep-alive bytes), key included.
                if let Some(answer) = out.output.future.take() {
                    out.output.future = Some(Box::pin(async move {
                        let mut answer = answer.await?;
                        client_key(&mut answer.key);
                        Ok(answer)
                    }));
                }
                Ok(out)
            }

            async fn upload_part(&self, mut req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
                store_key(&mut req.input.key)?;
                let (id, part) = (req.input.upload_id.clone(), req.input.part_number);
                let out = self.fs.upload_part(req).await?;
                sync_part(&self.root, &id, part).await?;
                Ok(out)
            }

            async fn abort_multipart_upload(&self, mut req: S3Request<AbortMultipartUploadInput>) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
                store_key(&mut req.input.key)?;
                self.fs.abort_multipart_upload(req).await
            }

            async fn list_parts(&self, mut req: S3Request<ListPartsInput>) -> S3Result<S3Response<ListPartsOutput>> {
                store_key(&mut req.input.key)?;
                let mut out = self.fs.list_parts(req).await?;
                client_key(&mut out.output.key);
                Ok(out)
            }

            async fn list_objects(&self, req: S3Request<ListObjectsInput>) -> S3Result<S3Response<ListObjectsOutput>> {
                // As s3s-fs answers V1: the V2 listing, with its last key as the next marker.
                let v2 = list::list_objects_v2(&self.root, req.input.into()).await?;
                Ok(S3Response::new(ListObjectsOutput {
                    contents: v2.contents,
                    common_prefixes: v2.common_prefixes,
                    delimiter: v2.delimiter,
                    encoding_type: v2.encoding_type,
                    name: v2.name,
                    prefix: v2.prefix,
                    max_keys: v2.max_keys,
                    is_truncated: v2.is_truncated,
                    marker: v2.start_after,
                    next_marker: v2.next_continuation_token,
                    ..Default::default()
                }))
            }

            async fn delete_bucket(&self, req: S3Request<DeleteBucketInput>) -> S3Result<S3Response<DeleteBucketOutput>> {
                // s3s-fs removes the bucket's directory with everything in it; S3 refuses.
                let any = ListObjectsV2Input {
                    bucket: req.input.bucket.clone(),
                    max_keys: Some(1),
                    ..Default::default()
                };
                let listed = list::list_objects_v2(&self.root, any).await?;
                if listed.key_count.unwrap_or(0) > 0 || listed.contents.is_some_and(|c| !c.is_empty()) {
                    return Err(s3_error!(BucketNotEmpty));
                }
                self.fs.delete_bucket(req).await
            }
        }
    };
}

store! {
    list_buckets: ListBucketsInput => ListBucketsOutput;
    create_bucket: CreateBucketInput => CreateBucketOutput;
    head_bucket: HeadBucketInput => HeadBucketOutput;
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput;
}

/// Turns the key a copy reads into its stored form (a reserved one is not there).
fn store_source_key(source: &mut CopySource) -> S3Result<()> {
    if let CopySource::Bucket { key, .. } = source {
        let mut k = key.to_string();
        store_read_key(&mut k)?;
        *key = k.into_boxed_str();
    }
    Ok(())
}

/// The (bucket, key) a copy reads.
fn copy_source(source: &CopySource) -> S3Result<(&str, &str)> {
    match source {
        CopySource::Bucket { bucket, key, .. } => Ok((bucket, key)),
        _ => Err(s3_error!(
            NotImplemented,
            "the local store copies from buckets only"
        )),
    }
}

impl LocalDir {
    /// Removes the directories that deleting `keys` left empty, unless a write is making
    /// or using directories right now: then they stay (harmless) rather than the delete
    /// waiting for that write.
    async fn tidy(&self, bucket: &str, keys: &[String]) {
        let Ok(_dirs) = self.dirs.try_write() else {
            return;
        };
        for key in keys {
            remove_empty_parents(&self.root, bucket, key).await;
        }
    }

    /// DeleteObjects: s3s-fs's, with the keys it cannot delete or would fail the batch on
    /// answered here, the per-key ETags it ignores checked, and the tidying after it.
    async fn delete_batch(
        &self,
        mut req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let bucket = req.input.bucket.clone();
        // Keys the store cannot keep, and keys without a file (`a/` while `a` is an object,
        // `a` while `a/b` is; s3s-fs fails the batch on those), are not there: deleted, as
        // S3 reports a missing key, unless an ETag was pinned (then NoSuchKey, as for a
        // DeleteObject with If-Match). `o` names the client's key.
        let (mut absent, mut missing) = (Vec::new(), Vec::new());
        let mut not_there = |o: ObjectIdentifier| {
            if o.e_tag.is_some() {
                missing.push(crate::error::key_error(&o, &s3_error!(NoSuchKey)));
            } else {
                absent.push(DeletedObject {
                    key: Some(o.key),
                    version_id: o.version_id,
                    ..Default::default()
                });
            }
        };
        for o in std::mem::take(&mut req.input.delete.objects) {
            let mut key = o.key.clone();
            if store_key(&mut key).is_ok() && storable_key(&bucket, &key, false).is_ok() {
                req.input.delete.objects.push(ObjectIdentifier { key, ..o });
            } else {
                not_there(o);
            }
        }
        let keys: Vec<String> = req
            .input
            .delete
            .objects
            .iter()
            .map(|o| o.key.clone())
            .collect();
        let _keys = self
            .mutexes
            .lock_all(&bucket, keys.iter().map(String::as_str))
            .await;
        // Whether the file is there, and the per-key ETags s3s-fs ignores, are checked under
        // the mutexes: no write of these keys can come between the check and the delete.
        let mut refused = Vec::new();
        for o in std::mem::take(&mut req.input.delete.objects) {
            if !self.holds_file(&bucket, &o.key).await {
                let key = folder_marker::client(&o.key).to_string();
                not_there(ObjectIdentifier { key, ..o });
                continue;
            }
            let pin = o.e_tag.clone().map(ETagCondition::ETag);
            match self
                .etag_holds((&bucket, &o.key), pin.as_ref(), "the object changed")
                .await
            {
                Ok(()) => req.input.delete.objects.push(o),
                Err(e) => refused.push(crate::error::key_error(&o, &e)),
            }
        }
        let mut out = if req.input.delete.objects.is_empty() {
            DeleteObjectsOutput::default()
        } else {
            self.fs.delete_objects(req).await?.output
        };
        let deleted: Vec<String> = out
            .deleted
            .iter()
            .flatten()
            .filter_map(|d| d.key.clone())
            .collect();
        for key in &deleted {
            put::remove_sidecars(&self.root, &bucket, key).await;
        }
        self.tidy(&bucket, &deleted).await;
        out.errors.get_or_insert_with(Vec::new).extend(refused);
        // Stored keys back to the client's; the ones answered above never were stored.
        for d in out.deleted.iter_mut().flatten() {
            client_key(&mut d.key);
        }
        for e in out.errors.iter_mut().flatten() {
            client_key(&mut e.key);
        }
        out.errors.get_or_insert_with(Vec::new).extend(missing);
        out.deleted.get_or_insert_with(Vec::new).extend(absent);
        // Lists with nothing in them are left out, as S3 leaves them out.
        out.errors = out.errors.filter(|e| !e.is_empty());
        out.deleted = out.deleted.filter(|d| !d.is_empty());
        Ok(S3Response::new(out))
    }

    /// Checks that `key`'s file can go in place (`checks::placeable`). Empty
    /// directories in the way, which deletes left because writes were running, are removed
    /// once the writes that are placing files now have done (tokio's lock queues later ones
    /// behind this); if that takes over [`CLEAR_WAIT`], the client is asked to retry.
    async fn clear_way(&self, bucket: &str, key: &str) -> S3Result<()> {
        let Err(blocked) = placeable(&self.root, bucket, key).await else {
            return Ok(());
        };
        let dir = match blocked {
            Blocked::Taken(e) => return Err(e),
            Blocked::EmptyDirectory(dir) => dir,
        };
        // Called holding no lock, so waiting for the write side cannot deadlock.
        if let Ok(_dirs) = tokio::time::timeout(CLEAR_WAIT, self.dirs.write()).await {
            // Leaves what a write put in meanwhile; the check below tells.
            remove_empty_tree(&dir).await;
        }
        placeable(&self.root, bucket, key)
            .await
            .map_err(Blocked::into_error)
    }

    /// The file of the stored key `key`; `None` for a key that would lead out of the store.
    fn object_path(&self, bucket: &str, key: &str) -> Option<PathBuf> {
        Some(self.root.join(bucket).join(key)).filter(|p| p.starts_with(&self.root))
    }

    /// Whether the stored key `key` has a file (not a directory, not missing).
    async fn holds_file(&self, bucket: &str, key: &str) -> bool {
        let Some(path) = self.object_path(bucket, key) else {
            return false;
        };
        tokio::fs::symlink_metadata(&path)
            .await
            .is_ok_and(|m| m.is_file())
    }

    /// Checks an If-Match that s3s-fs ignores (a DeleteObject's, a copy's
    /// `x-amz-copy-source-if-match`), under the caller's lock of the object: the gateway
    /// pins deletes and the pieces of its server-side copies to the object it saw, and a
    /// copy must not mix in bytes of one written since.
    async fn etag_holds(
        &self,
        (bucket, key): (&str, &str),
        if_match: Option<&ETagCondition>,
        refusal: &str,
    ) -> S3Result<()> {
        let Some(ETagCondition::ETag(want)) = if_match else {
            return Ok(());
        };
        let current = put::current_etag(&self.fs, bucket, key).await?;
        if current.as_ref().map(ETag::value) == Some(want.value()) {
            Ok(())
        } else {
            Err(s3_error!(PreconditionFailed, "{refusal}"))
        }
    }

    /// Whether `key` names a directory of the store rather than an object (stored keys
    /// never end in `/`: folder markers are files, `folder_marker.rs`).
    async fn names_directory(&self, bucket: &str, key: &str) -> bool {
        let Some(path) = self.object_path(bucket, key) else {
            return false;
        };
        tokio::fs::metadata(&path).await.is_ok_and(|m| m.is_dir())
    }

    /// GetObject from the file, in 1 MiB reads; metadata from s3s-fs's sidecar.
    async fn read(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        if input.version_id.is_some() || input.part_number.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "the local store has no versions or part reads"
            ));
        }
        let head = HeadObjectInput {
            bucket: input.bucket.clone(),
            key: input.key.clone(),
            ..Default::default()
        };
        if self.names_directory(&input.bucket, &input.key).await {
            return Err(s3_error!(NoSuchKey));
        }
        // The sidecars and the body are read under the key's mutex: an open file keeps the
        // body it had even if a writer renames another over it afterwards.
        let key_guard = self.mutexes.lock(&input.bucket, &input.key).await;
        let head = self.fs.head_object(request(head)).await?.output;
        if let Some(ETagCondition::ETag(want)) = &input.if_match
            && head.e_tag.as_ref().map(ETag::value) != Some(want.value())
        {
            return Err(s3_error!(PreconditionFailed));
        }
        let size = head
            .content_length
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0);
        let (start, end) = match input.range {
            None => (0, size),
            Some(r) => {
                let span = r.check(size).map_err(|_| s3_error!(InvalidRange))?;
                (span.start, span.end)
            }
        };
        let path = self
            .object_path(&input.bucket, &input.key)
            .ok_or_else(|| s3_error!(NoSuchKey))?;
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|_| s3_error!(NoSuchKey))?;
        drop(key_guard);
        file.seek(SeekFrom::Start(start))
            .await
            .map_err(|e| s3_error!(InternalError, "{e}"))?;
        let stream =
            tokio_util::io::ReaderStream::with_capacity(file.take(end - start), READ_CHUNK)
                .map_err(|e| Box::new(e) as s3s::StdError);
        let len = i64::try_from(end - start).unwrap_or(i64::MAX);
        let output = GetObjectOutput {
            body: Some(crate::body::sized(stream, end - start)),
            content_length: Some(len),
            content_range: input
                .range
                .map(|_| format!("bytes {start}-{}/{size}", end.saturating_sub(1))),
            e_tag: head.e_tag,
            last_modified: head.last_modified,
            metadata: head.metadata,
            content_type: head.content_type,
            content_encoding: head.content_encoding,
            content_disposition: head.content_disposition,
            cache_control: head.cache_control,
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }
}

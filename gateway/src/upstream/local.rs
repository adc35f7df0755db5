//! The embedded default's store: a local directory in s3s-fs's layout, called in-process.
//!
//! s3s-fs serves reads in 4 KiB pieces, each a blocking-pool round trip (about 80 MB/s
//! here, `../shared/NOTES.md` section 7), which would make the embedded default's upstream
//! the bottleneck. This wrapper answers GetObject itself from the same files with 1 MiB
//! reads, and hands every other call to s3s-fs unchanged.

#![allow(clippy::wildcard_imports, reason = "the S3 DTO namespace")]

use std::io::SeekFrom;
use std::path::PathBuf;

use futures::TryStreamExt as _;
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use super::request;

const READ_CHUNK: usize = 1 << 20;

/// s3s-fs with a fast object reader.
pub struct LocalDir {
    fs: s3s_fs::FileSystem,
    root: PathBuf,
}

impl LocalDir {
    /// Serves `root` (created by the caller).
    ///
    /// # Errors
    /// When s3s-fs cannot open the directory.
    pub fn new(root: &std::path::Path) -> Result<Self, String> {
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| format!("{e:?}"))?;
        let root = root.canonicalize().map_err(|e| e.to_string())?;
        Ok(Self { fs, root })
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

            async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
                self.read(req).await
            }
        }
    };
}

store! {
    put_object: PutObjectInput => PutObjectOutput;
    head_object: HeadObjectInput => HeadObjectOutput;
    delete_object: DeleteObjectInput => DeleteObjectOutput;
    delete_objects: DeleteObjectsInput => DeleteObjectsOutput;
    list_objects: ListObjectsInput => ListObjectsOutput;
    list_objects_v2: ListObjectsV2Input => ListObjectsV2Output;
    copy_object: CopyObjectInput => CopyObjectOutput;
    create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput;
    upload_part: UploadPartInput => UploadPartOutput;
    upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput;
    complete_multipart_upload: CompleteMultipartUploadInput => CompleteMultipartUploadOutput;
    abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput;
    list_parts: ListPartsInput => ListPartsOutput;
    list_buckets: ListBucketsInput => ListBucketsOutput;
    create_bucket: CreateBucketInput => CreateBucketOutput;
    head_bucket: HeadBucketInput => HeadBucketOutput;
    delete_bucket: DeleteBucketInput => DeleteBucketOutput;
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput;
}

impl LocalDir {
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
            .root
            .join(input.bucket.as_str())
            .join(input.key.as_str());
        if !path.starts_with(&self.root) {
            return Err(s3_error!(NoSuchKey));
        }
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|_| s3_error!(NoSuchKey))?;
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

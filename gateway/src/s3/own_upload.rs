//! The gateway's own upstream multipart uploads (not a client's): a large CopyObject, a
//! locked PutObject above one part, an irregular completion's trailer rewrite. Each is
//! aborted unless it completed, whether its work failed or the client went away: hyper
//! drops a handler's future when its client disconnects, and an upload left open holds
//! every part stored so far (billed by S3 and B2, and invisible in listings).

use s3s::dto::{AbortMultipartUploadInput, CreateMultipartUploadInput};
use s3s::{S3Result, s3_error};

use crate::gateway::Gateway;
use crate::upstream::request;

/// An open upload of the gateway's own; aborted when dropped before [`OwnUpload::finish`].
pub(super) struct OwnUpload {
    gw: Gateway,
    bucket: String,
    key: String,
    id: String,
    /// Cleared by `finish`, which settles the upload itself.
    open: bool,
}

impl OwnUpload {
    /// Starts an upload upstream.
    pub(super) async fn start(gw: &Gateway, create: CreateMultipartUploadInput) -> S3Result<Self> {
        let (bucket, key) = (create.bucket.clone(), create.key.clone());
        let id = gw
            .upstream
            .s3()
            .create_multipart_upload(request(create))
            .await?
            .output
            .upload_id
            .ok_or_else(|| s3_error!(InternalError, "no upload ID"))?;
        Ok(Self {
            gw: gw.clone(),
            bucket,
            key,
            id,
            open: true,
        })
    }

    /// The upstream's upload ID.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Passes on `result`, the outcome of the work that should have completed the upload;
    /// when it is an error, first aborts the upload so that no parts are left behind.
    pub(super) async fn finish<T>(mut self, result: S3Result<T>) -> S3Result<T> {
        self.open = false;
        if result.is_err() {
            abort(&self.gw, &self.bucket, &self.key, &self.id).await;
        }
        result
    }
}

impl Drop for OwnUpload {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        // The future that held the upload was dropped mid-way. Aborting an upload that
        // the upstream has completed meanwhile is answered NoSuchUpload and changes nothing.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (gw, bucket, key, id) = (
            self.gw.clone(),
            std::mem::take(&mut self.bucket),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.id),
        );
        runtime.spawn(async move { abort(&gw, &bucket, &key, &id).await });
    }
}

async fn abort(gw: &Gateway, bucket: &str, key: &str, id: &str) {
    let abort = AbortMultipartUploadInput {
        bucket: bucket.into(),
        key: key.into(),
        upload_id: id.into(),
        ..Default::default()
    };
    if let Err(e) = gw
        .upstream
        .s3()
        .abort_multipart_upload(request(abort))
        .await
    {
        tracing::warn!(bucket, key, error = %e, "could not abort the gateway's own upload");
    }
}

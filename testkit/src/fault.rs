//! A fault-injecting upstream for crash tests: [`KillOnStore`] serves the embedded
//! default's store (`LocalDir`) and, at one armed request, SIGKILLs the `kura` process that
//! sent it. The request is carried out first and the process dies before it hears the
//! answer: "the object was written, then the process died", the case a crash-safe write
//! order has to survive. The kill comes from the store, so it lands exactly after the named
//! write however fast or slow the machine is, which no polling of the directory can do.
//!
//! [`FaultyUpstream`] runs it on a runtime of its own, so that synchronous tests (which
//! run `kura` as processes) can use it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kura_gateway::upstream::LocalDir;
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CopyObjectInput, CopyObjectOutput, CreateBucketInput,
    CreateBucketOutput, CreateMultipartUploadInput, CreateMultipartUploadOutput, DeleteBucketInput,
    DeleteBucketOutput, DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput,
    DeleteObjectsOutput, GetBucketLocationInput, GetBucketLocationOutput, GetObjectInput,
    GetObjectOutput, HeadBucketInput, HeadBucketOutput, HeadObjectInput, HeadObjectOutput,
    ListBucketsInput, ListBucketsOutput, ListObjectsInput, ListObjectsOutput, ListObjectsV2Input,
    ListObjectsV2Output, ListPartsInput, ListPartsOutput, PutObjectInput, PutObjectOutput,
    UploadPartCopyInput, UploadPartCopyOutput, UploadPartInput, UploadPartOutput,
};
use s3s::{S3, S3Request, S3Response, S3Result};

use crate::upstream::serve;

/// Which request kills: the `nth` (from 1) `PutObject`, `DeleteObject` or `GetObject`
/// whose key (within the bucket, the repository's prefix included) starts with
/// `key_prefix`.
#[derive(Clone, Debug)]
pub struct Trigger {
    /// `PutObject`, `DeleteObject` or `GetObject`.
    pub op: Op,
    /// `cluster-a/index/`, `cluster-a/data/`, ...
    pub key_prefix: String,
    /// Which matching request, counted from 1 after [`Faults::arm`].
    pub nth: u32,
}

/// The operations a [`Trigger`] can name: the writes of a repository, and its reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `PutObject`: killed once the object is stored.
    Put,
    /// `DeleteObject`: killed once the object is gone.
    Delete,
    /// `GetObject`: killed before it is answered, as a reader (a restore) killed while it
    /// waits on its data.
    Get,
}

/// What a test arms and reads back; shared with the store.
#[derive(Default)]
pub struct Faults {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    trigger: Option<Trigger>,
    seen: u32,
    /// The process to kill; 0 until [`Faults::target`] names it.
    pid: u32,
    /// The key of the request that killed, once one did.
    fired: Option<String>,
}

impl Faults {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Arms `trigger` (one kill, then disarmed), before the process it kills is spawned:
    /// a request that matches before [`Faults::target`] names the process waits for it.
    pub fn arm(&self, trigger: Trigger) {
        let mut s = self.state();
        s.trigger = Some(trigger);
        s.seen = 0;
        s.pid = 0;
        s.fired = None;
    }

    /// Names the process the armed trigger kills.
    pub fn target(&self, pid: u32) {
        self.state().pid = pid;
    }

    /// Disarms what did not fire, so that it cannot kill a later process.
    pub fn disarm(&self) {
        self.state().trigger = None;
    }

    /// The key of the request after which the process was killed, if it was.
    #[must_use]
    pub fn fired(&self) -> Option<String> {
        self.state().fired.clone()
    }

    /// Whether this request is the armed one; counts it when it matches.
    fn matches(&self, op: Op, key: &str) -> bool {
        let mut s = self.state();
        let Some(nth) = s
            .trigger
            .as_ref()
            .filter(|t| t.op == op && key.starts_with(&t.key_prefix))
            .map(|t| t.nth)
        else {
            return false;
        };
        s.seen += 1;
        s.seen == nth
    }

    /// SIGKILLs the target (waiting until it is named) and disarms.
    async fn kill(&self, key: &str) {
        let pid = loop {
            let pid = self.state().pid;
            if pid != 0 {
                break pid;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // Recorded first: the test reads it as soon as the process is gone.
        {
            let mut s = self.state();
            s.trigger = None;
            s.fired = Some(key.to_owned());
        }
        let status = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -KILL {pid}: {status}");
    }
}

/// `LocalDir` with a kill after the armed write (see the module doc).
pub struct KillOnStore {
    inner: LocalDir,
    faults: Arc<Faults>,
}

impl KillOnStore {
    /// Wraps `inner`; `faults` arms it.
    #[must_use]
    pub fn new(inner: LocalDir, faults: Arc<Faults>) -> Self {
        Self { inner, faults }
    }
}

macro_rules! pass {
    ($($name:ident: $input:ty => $output:ty;)*) => {
        #[async_trait::async_trait]
        impl S3 for KillOnStore {
            $(
                async fn $name(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    self.inner.$name(req).await
                }
            )*

            async fn put_object(&self, req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
                let key = req.input.key.clone();
                let armed = self.faults.matches(Op::Put, &key);
                let out = self.inner.put_object(req).await;
                if armed {
                    self.faults.kill(&key).await;
                }
                out
            }

            async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
                let key = req.input.key.clone();
                if self.faults.matches(Op::Get, &key) {
                    self.faults.kill(&key).await;
                }
                self.inner.get_object(req).await
            }

            async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
                let key = req.input.key.clone();
                let armed = self.faults.matches(Op::Delete, &key);
                let out = self.inner.delete_object(req).await;
                if armed {
                    self.faults.kill(&key).await;
                }
                out
            }
        }
    };
}

// Every operation `LocalDir` implements, so that the wrapper answers as it does.
pass! {
    list_buckets: ListBucketsInput => ListBucketsOutput;
    create_bucket: CreateBucketInput => CreateBucketOutput;
    head_bucket: HeadBucketInput => HeadBucketOutput;
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput;
    delete_bucket: DeleteBucketInput => DeleteBucketOutput;
    head_object: HeadObjectInput => HeadObjectOutput;
    delete_objects: DeleteObjectsInput => DeleteObjectsOutput;
    list_objects: ListObjectsInput => ListObjectsOutput;
    list_objects_v2: ListObjectsV2Input => ListObjectsV2Output;
    copy_object: CopyObjectInput => CopyObjectOutput;
    upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput;
    create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput;
    complete_multipart_upload: CompleteMultipartUploadInput => CompleteMultipartUploadOutput;
    upload_part: UploadPartInput => UploadPartOutput;
    abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput;
    list_parts: ListPartsInput => ListPartsOutput;
}

/// A [`KillOnStore`] on a new temporary directory, served on loopback by a runtime of its
/// own until this is dropped.
pub struct FaultyUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Arms the kill.
    pub faults: Arc<Faults>,
    /// What it stores in: `DIR/BUCKET/KEY` holds each object's body.
    pub dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

impl FaultyUpstream {
    /// Starts it.
    ///
    /// # Panics
    /// When the directory, the runtime or the listener cannot be made.
    #[must_use]
    pub fn start() -> FaultyUpstream {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let faults = Arc::new(Faults::default());
        let store = KillOnStore::new(
            LocalDir::new(dir.path()).expect("LocalDir on a new directory"),
            faults.clone(),
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let addr = runtime.block_on(serve(store));
        FaultyUpstream {
            addr,
            faults,
            dir,
            _runtime: runtime,
        }
    }

    /// `http://ADDR`, for a gateway's upstream URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where the upstream stores `bucket/key`'s body.
    #[must_use]
    pub fn stored_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.dir.path().join(bucket).join(key)
    }
}

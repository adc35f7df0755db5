//! Where repository objects are stored: a small trait keyed by (file type, name)
//! (`mod.rs`), and its one implementation, S3 through a kura gateway (`s3.rs`, FORMAT.md
//! section 2), which retries transient failures with backoff for a bounded time
//! (`retry.rs`).

mod retry;
mod s3;

use std::future::Future;

use bytes::Bytes;

use crate::error::Result;

pub use retry::DEFAULT_RETRY_FOR;
pub use s3::{S3Location, S3Storage, endpoint_is_protected};

/// The kinds of repository objects, each under its own name prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    /// `config`.
    Config,
    /// `data/XX/ID`: packs.
    Pack,
    /// `index/ID`.
    Index,
    /// `snapshots/ID`.
    Snapshot,
    /// `prune/ID`: packs marked for deletion (FORMAT.md section 9).
    PruneMark,
    /// `lease/N`: the upkeep lease of generation N (FORMAT.md section 9.1).
    Lease,
    /// `session/TOKEN`: a running backup's session (FORMAT.md section 9.2).
    Session,
}

impl FileType {
    /// The object name of `name` (an ID in hex; ignored for `Config`), relative to the
    /// repository prefix.
    #[must_use]
    pub fn path(self, name: &str) -> String {
        match self {
            Self::Config => "config".into(),
            Self::Pack => format!("data/{}/{name}", name.get(..2).unwrap_or("00")),
            Self::Index => format!("index/{name}"),
            Self::Snapshot => format!("snapshots/{name}"),
            Self::PruneMark => format!("prune/{name}"),
            Self::Lease => format!("lease/{name}"),
            Self::Session => format!("session/{name}"),
        }
    }

    fn list_prefix(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Pack => "data/",
            Self::Index => "index/",
            Self::Snapshot => "snapshots/",
            Self::PruneMark => "prune/",
            Self::Lease => "lease/",
            Self::Session => "session/",
        }
    }
}

/// Object storage for one repository. Objects are small (config, index, snapshots) or
/// bounded by the pack size, so whole-object calls take and return `Bytes`.
pub trait Storage: Send + Sync + 'static {
    /// Stores an object (replacing none: every name but `config` is content-addressed).
    fn put(&self, ft: FileType, name: &str, data: Bytes)
    -> impl Future<Output = Result<()>> + Send;
    /// Stores an object only if none is there under that name (`If-None-Match: *`), in one
    /// request, so that of two writers racing for a name exactly one wins. `Ok(false)`
    /// when an object was already there; nothing is written then.
    fn create(
        &self,
        ft: FileType,
        name: &str,
        data: Bytes,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Reads a whole object.
    fn get(&self, ft: FileType, name: &str) -> impl Future<Output = Result<Bytes>> + Send;
    /// Reads `len` bytes at `offset`.
    fn get_range(
        &self,
        ft: FileType,
        name: &str,
        offset: u64,
        len: u64,
    ) -> impl Future<Output = Result<Bytes>> + Send;
    /// Whether an object exists.
    fn exists(&self, ft: FileType, name: &str) -> impl Future<Output = Result<bool>> + Send;
    /// Names (IDs in hex) and sizes of all objects of a type.
    fn list(&self, ft: FileType) -> impl Future<Output = Result<Vec<(String, u64)>>> + Send;
    /// Deletes an object.
    fn delete(&self, ft: FileType, name: &str) -> impl Future<Output = Result<()>> + Send;
    /// When an object was last written (seconds since the Unix epoch), if it exists.
    fn modified(
        &self,
        ft: FileType,
        name: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
}

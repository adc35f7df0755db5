//! kura's deduplicating snapshot repository (issue 5; format in `FORMAT.md`).
//!
//! Everything is stored through a kura gateway, which encrypts it; this crate chunks
//! (FastCDC for files and streams, fixed blocks with holes for devices), names chunks by
//! keyed BLAKE3, compresses them with zstd when that pays, packs them, and writes index,
//! tree and snapshot objects in an order that leaves the repository readable whenever a
//! backup stops.
//!
//! - [`storage`]: where objects are kept, keyed by (file type, name); S3 through the gateway.
//! - [`Repository`]: an opened repository (config read, index loaded).
//! - [`backup()`] and [`restore()`]: the two directions.
//! - [`check()`], [`forget()`], [`prune()`]: upkeep.

pub mod backup;
pub mod blob;
pub mod cdc;
pub mod check;
pub mod config;
pub mod diff;
pub mod error;
pub mod forget;
pub mod fsmeta;
pub mod id;
pub mod include;
pub mod index;
mod marks;
pub mod pack;
pub mod progress;
pub mod prune;
pub mod repository;
pub mod restore;
pub mod snapshot;
pub mod storage;
pub mod tree;

pub use backup::{Options as BackupOptions, Source, backup};
pub use check::{CheckReport, check};
pub use config::{Config, Params};
pub use diff::{Change, diff};
pub use error::{RepoError, Result};
pub use forget::{KeepPolicy, forget};
pub use id::Id;
pub use include::Include;
pub use progress::Progress;
pub use prune::{PruneReport, prune};
pub use repository::Repository;
pub use restore::{FAILURES_IN_A_ROW, RestoreSummary, restore, restore_file, write_content};
pub use snapshot::Snapshot;
pub use storage::{FileType, S3Location, S3Storage, Storage};
pub use tree::{Content, Node, NodeType, Tree};

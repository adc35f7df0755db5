//! kura's deduplicating snapshot repository (issue 5; format in `FORMAT.md`).
//!
//! Everything is stored through a kura gateway, which encrypts it; this crate chunks
//! (FastCDC for files and streams, fixed blocks with holes for devices), names chunks by
//! keyed BLAKE3, compresses them with zstd when that pays, packs them, and writes index,
//! tree and snapshot objects in an order that leaves the repository readable whenever a
//! backup stops.
//!
//! The public paths are the re-exports below; the modules behind them are private, but
//! for [`fsmeta`] (extended attributes, for callers that compare them).
//!
//! - `storage/`: where objects are kept, keyed by (file type, name): [`Storage`], and
//!   [`S3Storage`], S3 through the gateway.
//! - [`Repository`] (`repository.rs`): an opened repository (config read, index loaded).
//! - [`backup()`] (`backup/`: walk, read, chunk, then the packer) and [`restore()`]
//!   (`restore/`: the tree walk, writing a file, direct I/O, fetching, opening a
//!   device): the two directions.
//! - [`check()`], [`forget()`], [`prune()`]: upkeep. Which snapshots a command looks at,
//!   and how `forget` groups them, is `select.rs`'s, shared with resolving `latest`;
//!   prune's marks, which backups read too, are `marks.rs`'s; the upkeep lease
//!   `lease.rs`'s, backups' sessions `session.rs`'s, and the storage's clock, by which all
//!   of them age, `clock.rs`'s.
//! - Formats: `config.rs`, `id.rs`, `blob.rs`, `pack.rs`, `index.rs`, `tree.rs`,
//!   `snapshot.rs`; chunking `cdc.rs`; errors [`RepoError`].

mod aligned;
mod backup;
mod beneath;
mod blob;
mod blocks;
mod cdc;
mod check;
mod clock;
mod config;
mod deep;
mod diff;
mod error;
mod extents;
mod forget;
pub mod fsmeta;
mod id;
mod include;
mod index;
mod keep;
mod lease;
mod marks;
mod pack;
mod progress;
mod prune;
mod repair_index;
mod repair_snapshots;
mod repository;
mod restore;
mod select;
mod session;
mod snapshot;
mod storage;
mod task;
mod tree;
mod trees_ahead;

pub use backup::{BlockMap, BlockOptions, Options as BackupOptions, Source, backup};
pub use blob::{BlobType, Compression};
pub use check::{CheckReport, check};
pub use config::{ChunkerSizes, Config, DEFAULT_GRACE, DEFAULT_SESSION_TIMEOUT, Params};
pub use diff::{Change, diff};
pub use error::{LatestCandidate, RepoError, Result};
pub use extents::{Extents, ExtentsFormat};
pub use forget::{ForgetGroup, ForgetOptions, ForgetReport, Verdict, forget};
pub use id::Id;
pub use include::Include;
pub use index::{INDEX_INTERVAL, Index};
pub use keep::{KeepPolicy, KeepReason, Within};
pub use pack::BlobLocation;
pub use progress::Progress;
pub use prune::{PruneReport, prune};
pub use repair_index::{RepairIndexReport, repair_index};
pub use repair_snapshots::{RepairSnapshotsReport, repair_snapshots};
pub use repository::Repository;
pub use restore::{
    ChangedRestore, FAILURES_IN_A_ROW, FileTarget, RestoreSummary, UNFINISHED, restore,
    restore_changed_to, restore_file, restore_file_to, write_content,
};
pub use select::{GroupBy, GroupKey, SnapshotFilter};
pub use snapshot::{BlockRecord, Snapshot, Summary};
pub use storage::{
    DEFAULT_RETRY_FOR, FileType, S3Location, S3Storage, Storage, endpoint_is_protected,
};
pub use tree::{Content, Depth, MAX_DEPTH, MAX_PATH_BYTES, Node, NodeType, Tree};

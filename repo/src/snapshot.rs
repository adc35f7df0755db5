//! Snapshots (FORMAT.md section 8.3).

use serde::{Deserialize, Serialize};

use crate::id::Id;

/// Counts for one backup.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Files seen.
    pub files: u64,
    /// Files taken from the parent snapshot without reading them.
    #[serde(default)]
    pub files_unchanged: u64,
    /// Directories seen.
    pub dirs: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes of new blobs (before compression).
    pub bytes_added: u64,
    /// Bytes uploaded in packs (after compression).
    pub bytes_stored: u64,
    /// New blobs.
    pub blobs_added: u64,
    /// Files that changed while they were read, at every reading (stored as read).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub files_changed_during_backup: u64,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a block backup chose the blocks it read (FORMAT.md section 8.3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRecord {
    /// The source's identity: what `--source-id` named, or the path backed up. An
    /// incremental's parent must have the same.
    pub source: String,
    /// The source's size in bytes.
    pub size: u64,
    /// The size of its blocks (the repository's `block_size`).
    pub block_size: u64,
    /// How the blocks read were chosen: `all`; `seek_data` (an image file's holes, as the
    /// file system reports them, were not read); `allocated:FORMAT` (only the extents of
    /// a `thin_dump`, CSI or list file were read, the rest taken for zeros);
    /// `changed:FORMAT` (only the changed extents were read, the rest taken from the
    /// parent); `verified:FORMAT` (a run given an extents file that read every block and
    /// compared).
    pub read: String,
    /// What the image is of, as the extents file named it: `thin:N` for thin device N
    /// (a `thin_dump`'s device, a `thin_delta`'s newer one). An incremental whose
    /// `thin_delta` is since another device than its parent's is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Backups in a row, this one included, that trusted an extents file (`allocated` or
    /// `changed`) since the last one that read every block: 0 for one that read every
    /// block.
    #[serde(default)]
    pub trusted_runs: u32,
    /// Bytes taken from the parent without reading them.
    #[serde(default)]
    pub bytes_from_parent: u64,
    /// Bytes taken for zeros without reading them (holes, unallocated extents).
    #[serde(default)]
    pub bytes_unallocated: u64,
    /// A verifying run's blocks that differed from what the extents and the parent said,
    /// as `(offset, length)` in bytes: stored as read. Older snapshots of the chain may be
    /// wrong there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mismatched: Vec<(u64, u64)>,
}

/// One snapshot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    /// Start time, RFC 3339.
    pub time: String,
    /// Host name.
    pub host: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What was backed up, as text: a path that is not valid UTF-8 has each invalid
    /// sequence replaced by U+FFFD (see `paths_hex`).
    pub paths: Vec<String>,
    /// The exact bytes of every path, hex, in the order of `paths`: only when one of them
    /// is not valid UTF-8, so that two such paths stay apart (FORMAT.md 8.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths_hex: Option<Vec<String>>,
    /// Root tree.
    pub tree: Id,
    /// Parent snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Id>,
    /// Whether something could not be read.
    #[serde(default)]
    pub incomplete: bool,
    /// What could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// The files that changed while they were read, at every reading: stored as read
    /// (possibly torn), flagged in their nodes; the snapshot is not incomplete for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_during_backup: Vec<String>,
    /// Whether every node's `xattrs` is what the file system listed (FORMAT.md 8.3): no
    /// read of them failed, and those a re-run took from its parent came from a snapshot
    /// that has this too. Absent (`false`) in snapshots written before it was recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub xattrs_recorded: bool,
    /// Counts.
    #[serde(default)]
    pub summary: Summary,
    /// What a `--block` backup read and how it knew which blocks to read (FORMAT.md 8.3);
    /// absent for other backups and for block backups written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<BlockRecord>,
    /// Program and version.
    pub program: String,
}

impl Snapshot {
    /// The paths, each told apart exactly: as recorded where it is text, and where its
    /// bytes are not UTF-8 (`paths_hex`) as the text with the bytes after it, so that
    /// grouping and the default parent never take two volumes for one.
    #[must_use]
    pub fn exact_paths(&self) -> Vec<String> {
        let Some(hex) = self
            .paths_hex
            .as_ref()
            .filter(|h| h.len() == self.paths.len())
        else {
            return self.paths.clone();
        };
        self.paths
            .iter()
            .zip(hex)
            .map(|(text, hex)| {
                let exact = hex::decode(hex).is_ok_and(|b| std::str::from_utf8(&b).is_ok());
                if exact {
                    text.clone()
                } else {
                    format!("{text} (bytes {hex})")
                }
            })
            .collect()
    }

    /// `paths` and `paths_hex` for the paths a backup was given.
    #[must_use]
    pub fn record_paths(paths: &[std::ffi::OsString]) -> (Vec<String>, Option<Vec<String>>) {
        use std::os::unix::ffi::OsStrExt as _;
        let text = paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let exact = paths.iter().any(|p| p.to_str().is_none());
        let hex = exact.then(|| paths.iter().map(|p| hex::encode(p.as_bytes())).collect());
        (text, hex)
    }

    /// The instant of `time` (RFC 3339 with any offset), `None` when it does not parse.
    #[must_use]
    pub fn instant(&self) -> Option<time::OffsetDateTime> {
        time::OffsetDateTime::parse(&self.time, &time::format_description::well_known::Rfc3339).ok()
    }
}

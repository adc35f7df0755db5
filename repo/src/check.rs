//! `kura check [--read-data]`: every indexed pack exists; every blob a snapshot uses is
//! indexed; every directory's names are ones a restore accepts; with `--read-data`, every blob of every pack is read through the gateway and
//! hashed; and the snapshots and files that use a damaged pack are named.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::blob;
use crate::error::Result;
use crate::id::Id;
use crate::pack::{ENTRY_SIZE, TAIL_SIZE, entry_count, parse_header};
use crate::repository::Repository;
use crate::storage::{FileType, Storage};
use crate::tree::{Content, NodeType};

/// What `check` found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Each problem, one line.
    pub problems: Vec<String>,
    /// Packs missing or failing to read or verify.
    pub damaged_packs: BTreeSet<Id>,
    /// `snapshot SHORT: path` for every file or directory that uses a damaged pack or a
    /// missing blob.
    pub affected: Vec<String>,
    /// Packs read (with `--read-data`).
    pub packs_read: usize,
    /// Blobs hashed (with `--read-data`).
    pub blobs_verified: usize,
}

impl CheckReport {
    /// Whether nothing was found.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.affected.is_empty()
    }
}

/// Checks the repository.
///
/// # Errors
/// Only when storage cannot be listed at all; damage is reported, not raised.
pub async fn check<S: Storage>(repo: &mut Repository<S>, read_data: bool) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let snapshots = repo.snapshots_then_index().await?;
    let repo = &*repo;
    let stored: HashMap<String, u64> = repo
        .storage
        .list(FileType::Pack)
        .await?
        .into_iter()
        .collect();
    for pack in repo.index.packs() {
        if !stored.contains_key(&pack.to_hex()) {
            report.problems.push(format!(
                "pack {} is in the index but not in storage",
                pack.short()
            ));
            report.damaged_packs.insert(pack);
        } else if read_data && let Err(e) = read_pack(repo, &pack, &mut report).await {
            report.problems.push(format!("pack {}: {e}", pack.short()));
            report.damaged_packs.insert(pack);
        }
    }
    for (id, snap) in snapshots {
        let mut seen = HashSet::new();
        walk(repo, &id, &snap.tree, String::new(), &mut seen, &mut report).await;
    }
    Ok(report)
}

/// Reads one pack whole (it is bounded by the pack size) and verifies every blob.
async fn read_pack<S: Storage>(
    repo: &Repository<S>,
    pack: &Id,
    report: &mut CheckReport,
) -> Result<()> {
    let what = format!("pack {}", pack.short());
    let bytes = repo.storage.get(FileType::Pack, &pack.to_hex()).await?;
    if repo.config.id_key.id(&bytes) != *pack {
        return Err(crate::RepoError::corrupt(
            what,
            "content does not match its name",
        ));
    }
    let tail_at = bytes
        .len()
        .checked_sub(TAIL_SIZE)
        .ok_or_else(|| crate::RepoError::corrupt(&what, "too short"))?;
    let count = entry_count(&what, &bytes[tail_at..])?;
    let header_at = count
        .checked_mul(ENTRY_SIZE)
        .and_then(|n| tail_at.checked_sub(n))
        .ok_or_else(|| crate::RepoError::corrupt(&what, "header longer than the pack"))?;
    let mut offset = 0usize;
    for e in parse_header(&what, &bytes[header_at..tail_at])? {
        let end = offset + e.length as usize;
        let stored = bytes
            .get(offset..end)
            .ok_or_else(|| crate::RepoError::corrupt(&what, "blob past the header"))?;
        let raw = blob::decompress(&what, e.compression, stored, e.raw_length as usize)?;
        if repo.config.id_key.id(&raw) != e.id {
            return Err(crate::RepoError::corrupt(
                what,
                format!("blob {} does not hash to its ID", e.id.short()),
            ));
        }
        report.blobs_verified += 1;
        offset = end;
    }
    report.packs_read += 1;
    Ok(())
}

/// Whether a blob is usable: indexed, in a pack not found damaged.
fn usable<S: Storage>(repo: &Repository<S>, id: &Id, report: &CheckReport) -> bool {
    repo.index
        .get(id)
        .is_some_and(|l| !report.damaged_packs.contains(&l.pack))
}

async fn walk<S: Storage>(
    repo: &Repository<S>,
    snap: &Id,
    tree: &Id,
    path: String,
    seen: &mut HashSet<Id>,
    report: &mut CheckReport,
) {
    if !seen.insert(*tree) {
        return;
    }
    let shown = if path.is_empty() {
        "/".to_string()
    } else {
        path.clone()
    };
    if !usable(repo, tree, report) {
        report.affected.push(format!(
            "snapshot {}: {shown} (directory listing)",
            snap.short()
        ));
        return;
    }
    let tree = match repo.read_tree(tree).await {
        Ok(t) => t,
        Err(e) => {
            report
                .problems
                .push(format!("snapshot {}: {shown}: {e}", snap.short()));
            return;
        }
    };
    // What a restore refuses (`restore/tree.rs`) is damage too, though every blob is there.
    if let Err(why) = tree.check_names() {
        report.problems.push(format!(
            "snapshot {}: {shown}: {why}: a restore refuses this directory",
            snap.short()
        ));
    }
    for node in &tree.nodes {
        let child = format!("{path}/{}", node.name().to_string_lossy());
        match node.kind {
            Some(NodeType::Dir) => {
                if let Some(sub) = &node.subtree {
                    Box::pin(walk(repo, snap, sub, child, seen, report)).await;
                }
            }
            Some(NodeType::File) => {
                let bad = node
                    .content
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|c| match c {
                        Content::Blob { blob } => !usable(repo, blob, report),
                        Content::Zero { .. } => false,
                    });
                if bad {
                    report
                        .affected
                        .push(format!("snapshot {}: {child}", snap.short()));
                }
            }
            _ => {}
        }
    }
}

//! `kura check [--read-data]`: every indexed pack exists, and each index object's entries
//! for it match its header (offset, length, type, ID) and its size; every prune mark
//! matches its name; every blob a snapshot uses is indexed; every directory's names are
//! ones a restore accepts; with `--read-data`, every blob of every pack is read through
//! the gateway and hashed; and the snapshots and files that use a damaged pack are named.

use std::collections::hash_map::Entry::Vacant;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt as _;
use std::sync::Arc;

use crate::error::Result;
use crate::id::Id;
use crate::index::{IndexJson, PackJson};
use crate::marks::read_marks;
use crate::pack::{read_header, read_verified, size_of};
use crate::repository::Repository;
use crate::storage::{FileType, Storage};
use crate::tree::{Content, Depth, NodeType};

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
    let (snapshots, indexes) = repo.snapshots_then_index_objects().await?;
    let stored: HashMap<String, u64> = repo
        .storage
        .list(FileType::Pack)
        .await?
        .into_iter()
        .collect();
    compare_headers(repo, &indexes, &stored, &mut report).await;
    for name in read_marks(repo).await?.ignored {
        report.problems.push(format!(
            "prune mark {name} does not match its name: prune and backup ignore it"
        ));
    }
    // Every pack an index object lists, not only those the loaded index reads from: a
    // blob stored twice keeps one location there.
    let listed: BTreeSet<Id> = indexes
        .values()
        .flat_map(|idx| idx.packs.iter().map(|p| p.id))
        .collect();
    for pack in listed {
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
    // A file is affected only when no copy of its blob is usable.
    Arc::make_mut(&mut repo.index)
        .read_elsewhere(&indexes, |p| !report.damaged_packs.contains(p))?;
    let repo = &*repo;
    for (id, snap) in snapshots {
        let mut seen = HashSet::new();
        let top = (String::new(), Depth::default());
        walk(repo, &id, &snap.tree, top, &mut seen, &mut report).await;
    }
    Ok(report)
}

/// Compares each index object's entries for a stored pack with that pack's header and
/// size (the header read once per pack, two range GETs). A pack whose header cannot be
/// read is damaged.
async fn compare_headers<S: Storage>(
    repo: &Repository<S>,
    indexes: &BTreeMap<String, IndexJson>,
    stored: &HashMap<String, u64>,
    report: &mut CheckReport,
) {
    let mut headers: HashMap<Id, Option<PackJson>> = HashMap::new();
    for (name, idx) in indexes {
        let short = name.get(..8).unwrap_or(name);
        for listed in &idx.packs {
            let Some(&size) = stored.get(&listed.id.to_hex()) else {
                continue;
            };
            let pack = listed.id;
            if let Vacant(slot) = headers.entry(pack) {
                let read = match read_header(&*repo.storage, &pack, size).await {
                    Ok(entries) => {
                        if size_of(&entries) != size {
                            report.problems.push(format!(
                                "pack {}: {size} bytes stored, its header accounts for {}",
                                pack.short(),
                                size_of(&entries)
                            ));
                        }
                        Some(PackJson::new(pack, &entries))
                    }
                    Err(e) => {
                        report.problems.push(format!(
                            "pack {}: its header does not read: {e}",
                            pack.short()
                        ));
                        report.damaged_packs.insert(pack);
                        None
                    }
                };
                slot.insert(read);
            }
            let Some(Some(header)) = headers.get(&pack) else {
                continue;
            };
            let in_header: HashSet<_> = header.blobs.iter().collect();
            let wrong = listed
                .blobs
                .iter()
                .filter(|b| !in_header.contains(b))
                .count();
            if wrong > 0 || listed.blobs.len() != header.blobs.len() {
                report.problems.push(format!(
                    "pack {}: index/{short} lists {} blobs, {wrong} of them not as the pack's header has them (offset, length, type or ID); the header has {}",
                    pack.short(),
                    listed.blobs.len(),
                    header.blobs.len()
                ));
            }
        }
    }
}

/// Reads one pack whole and verifies every blob (`pack.rs`, `read_verified`).
async fn read_pack<S: Storage>(
    repo: &Repository<S>,
    pack: &Id,
    report: &mut CheckReport,
) -> Result<()> {
    let entries = read_verified(&*repo.storage, &repo.config.id_key, pack).await?;
    report.blobs_verified += entries.len();
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
    (path, depth): (String, Depth),
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
                    match depth.below(node.name().as_bytes()) {
                        Ok(below) => {
                            Box::pin(walk(repo, snap, sub, (child, below), seen, report)).await;
                        }
                        Err(why) => report.problems.push(format!(
                            "snapshot {}: {child}: {why}: a restore refuses this directory",
                            snap.short()
                        )),
                    }
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

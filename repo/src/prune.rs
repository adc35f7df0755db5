//! `kura prune`: two-phase removal of packs no snapshot uses, safe beside running backups
//! (FORMAT.md section 9).
//!
//! Phase 1 (every run) marks unused packs in a `prune/ID` object with the time. Phase 2
//! (a later run, once a mark is older than the grace period) deletes the packs of that mark
//! that are still unused by every snapshot then present, after rewriting the index objects
//! that list them. Backups only add, and a backup reads the marks when it starts (then the
//! index, which phase 2 rewrites before it deletes a mark) and relies on no blob of a
//! marked pack (`marks.rs`, `marked_packs`): it stores such a blob again. A backup that
//! started before a mark may have reused the pack's blobs; its snapshot, once written,
//! makes phase 2 keep the pack, so the grace period must exceed the longest backup
//! (default 24 h). The marks themselves are `marks.rs`'s. One prune or forget runs at a
//! time: each holds the repository's upkeep lease (`lease.rs`) and checks that it still
//! does before every step that deletes or rewrites.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use bytes::Bytes;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::index::{IndexJson, PackJson};
use crate::lease::Lease;
use crate::marks::{delete_mark, read_marks, write_mark};
use crate::repository::Repository;
use crate::storage::{FileType, Storage};
use crate::tree::{Content, NodeType};

/// What `prune` did.
#[derive(Debug, Default)]
pub struct PruneReport {
    /// Packs newly marked as unused.
    pub marked: usize,
    /// Packs deleted (marked in an earlier run, past the grace period, still unused).
    pub deleted: usize,
    /// Their stored bytes.
    pub deleted_bytes: u64,
    /// Marked packs that a snapshot uses again, unmarked.
    pub rescued: usize,
    /// Marks whose content does not match their name, ignored (neither acted on nor
    /// deleted): their packs are marked afresh if still unused.
    pub ignored_marks: Vec<String>,
}

/// Runs both phases.
///
/// # Errors
/// Storage errors, corrupt snapshots or trees (prune refuses to guess what is used);
/// `Unindexed` when a blob a snapshot uses is in no index object (its pack would look
/// unused), before anything is marked or deleted.
pub async fn prune<S: Storage>(repo: &mut Repository<S>, grace: Duration) -> Result<PruneReport> {
    let lease = Lease::acquire(&repo.storage, "prune").await?;
    let result = prune_holding(repo, grace, &lease).await;
    // A lease left behind would only block the next run until it goes stale.
    let released = lease.release().await;
    let report = result?;
    released?;
    Ok(report)
}

/// [`prune`] with the upkeep lease held, checked before each step that deletes or rewrites.
async fn prune_holding<S: Storage>(
    repo: &mut Repository<S>,
    grace: Duration,
    lease: &Lease<S>,
) -> Result<PruneReport> {
    let mut report = PruneReport::default();
    // Every index object, kept raw: a blob may be in several packs (two backups stored it
    // at once), and a pack holding any used blob is kept.
    let (snaps, mut indexes) = repo.snapshots_then_index_objects().await?;
    let used = used_blobs(repo, snaps.into_iter().map(|(_, s)| s.tree).collect()).await?;
    let mut needed: HashSet<Id> = HashSet::new();
    let mut unindexed = used.clone();
    for idx in indexes.values() {
        for p in &idx.packs {
            if p.blobs.iter().any(|b| used.contains(&b.1)) {
                needed.insert(p.id);
            }
            for b in &p.blobs {
                unindexed.remove(&b.1);
            }
        }
    }
    // A used blob that no index object lists is in a pack prune cannot tell from an unused
    // one (its index object was lost): deleting would destroy it. Refuse before any write.
    if !unindexed.is_empty() {
        let mut blobs: Vec<String> = unindexed.iter().map(Id::to_hex).collect();
        blobs.sort_unstable();
        return Err(RepoError::Unindexed { blobs });
    }
    let stored: BTreeMap<Id, u64> = repo
        .storage
        .list(FileType::Pack)
        .await?
        .into_iter()
        .filter_map(|(n, s)| Id::from_hex(&n).ok().map(|id| (id, s)))
        .collect();
    let unused: BTreeSet<Id> = stored
        .keys()
        .filter(|p| !needed.contains(p))
        .copied()
        .collect();

    // Phase 2: old marks.
    let now = time::OffsetDateTime::now_utc();
    let mut pending: HashSet<Id> = HashSet::new();
    let mut deleted: HashSet<Id> = HashSet::new();
    let marks = read_marks(repo).await?;
    report.ignored_marks = marks.ignored;
    for (name, mark) in marks.marks {
        let at =
            time::OffsetDateTime::parse(&mark.time, &time::format_description::well_known::Rfc3339)
                .map_err(|e| RepoError::corrupt(format!("prune/{name}"), e))?;
        if now - at < grace {
            pending.extend(mark.packs);
            continue;
        }
        let doomed: BTreeSet<Id> = mark
            .packs
            .iter()
            .filter(|p| unused.contains(p))
            .copied()
            .collect();
        let doomed = last_checks(repo, &indexes, doomed, now, grace).await?;
        report.rescued += mark.packs.len() - doomed.len();
        lease.check().await?;
        drop_from_index(repo, &mut indexes, &doomed).await?;
        for p in &doomed {
            repo.storage.delete(FileType::Pack, &p.to_hex()).await?;
            report.deleted += 1;
            report.deleted_bytes += stored.get(p).copied().unwrap_or(0);
            deleted.insert(*p);
        }
        delete_mark(repo, &name).await?;
    }

    // Phase 1: mark what is unused and not already waiting.
    let fresh: Vec<Id> = unused
        .iter()
        .filter(|p| !pending.contains(p) && !deleted.contains(p))
        .copied()
        .collect();
    if !fresh.is_empty() {
        report.marked = fresh.len();
        lease.check().await?;
        write_mark(repo, fresh).await?;
    }
    Ok(report)
}

/// Rewrites the index objects that list any of `doomed`: a new object with their other
/// packs is written first, then the old ones are deleted, so no moment lacks an entry.
async fn drop_from_index<S: Storage>(
    repo: &Repository<S>,
    indexes: &mut BTreeMap<String, IndexJson>,
    doomed: &BTreeSet<Id>,
) -> Result<()> {
    let touched: Vec<String> = indexes
        .iter()
        .filter(|(_, idx)| idx.packs.iter().any(|p| doomed.contains(&p.id)))
        .map(|(n, _)| n.clone())
        .collect();
    if touched.is_empty() {
        return Ok(());
    }
    let mut kept: Vec<PackJson> = Vec::new();
    for name in &touched {
        let idx = indexes.remove(name).expect("listed above");
        kept.extend(idx.packs.into_iter().filter(|p| !doomed.contains(&p.id)));
    }
    if !kept.is_empty() {
        let json = IndexJson { packs: kept };
        let bytes = serde_json::to_vec(&json).expect("index serializes");
        let id = repo.config.id_key.id(&bytes);
        repo.storage
            .put(FileType::Index, &id.to_hex(), Bytes::from(bytes))
            .await?;
        indexes.insert(id.to_hex(), json);
    }
    for name in &touched {
        repo.storage.delete(FileType::Index, name).await?;
    }
    Ok(())
}

/// Every blob any snapshot uses (trees and content). A tree that is not in the index is
/// counted as used without being read (the caller refuses to go on).
async fn used_blobs<S: Storage>(repo: &Repository<S>, mut trees: Vec<Id>) -> Result<HashSet<Id>> {
    let mut used = HashSet::new();
    while let Some(t) = trees.pop() {
        if !used.insert(t) || !repo.index.contains(&t) {
            continue;
        }
        for node in repo.read_tree(&t).await?.nodes {
            if node.kind == Some(NodeType::Dir) {
                trees.extend(node.subtree);
            }
            for c in node.content.unwrap_or_default() {
                if let Content::Blob { blob } = c {
                    used.insert(blob);
                }
            }
        }
    }
    Ok(used)
}

/// Last checks, just before deleting: a pack listed by an index object written since this
/// run read them, or written (again) within the grace period, is in use by a backup this
/// run cannot see yet (a re-run of a killed backup rebuilds its unindexed packs byte for
/// byte, under the same names). Returns the packs that may go.
async fn last_checks<S: Storage>(
    repo: &Repository<S>,
    indexes: &BTreeMap<String, IndexJson>,
    mut doomed: BTreeSet<Id>,
    now: time::OffsetDateTime,
    grace: Duration,
) -> Result<BTreeSet<Id>> {
    for (name, _) in repo.storage.list(FileType::Index).await? {
        if !indexes.contains_key(&name) {
            let bytes = repo.storage.get(FileType::Index, &name).await?;
            let late: IndexJson = serde_json::from_slice(&bytes)
                .map_err(|e| RepoError::corrupt(format!("index/{name}"), e))?;
            for p in &late.packs {
                doomed.remove(&p.id);
            }
        }
    }
    let now_secs = now.unix_timestamp();
    let grace_secs = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    let mut fresh_again = Vec::new();
    for p in &doomed {
        match repo.storage.modified(FileType::Pack, &p.to_hex()).await? {
            Some(t) if now_secs.saturating_sub(t) < grace_secs => fresh_again.push(*p),
            _ => {}
        }
    }
    for p in fresh_again {
        doomed.remove(&p);
    }
    Ok(doomed)
}

//! `kura prune`: two-phase removal of packs no snapshot uses, safe beside running backups
//! (FORMAT.md section 9).
//!
//! Phase 1 (every run) marks unused packs in a `prune/ID` object. Phase 2 (a later run)
//! deletes the packs of a mark that are still unused by every snapshot then present, after
//! rewriting the index objects that list them, once the mark is older than the grace
//! period and no live backup session started before it. Backups only add, and a backup
//! opens its session, then reads the marks (then the index, which phase 2 rewrites before
//! it deletes a mark) and relies on no blob of a marked pack (`marks.rs`, `marked_packs`):
//! it stores such a blob again. So only a backup whose session started before a mark may
//! rely on the mark's packs, and while its session is live the mark waits; once the
//! session is closed its snapshot is there and keeps what it uses. Sessions are listed
//! before snapshots, for that reason (`session.rs`). Every age is in storage time
//! (`clock.rs`): a mark's is its object's Last-Modified, now is a probe's. The marks
//! themselves are `marks.rs`'s. One prune or forget runs at a time: each holds the
//! repository's upkeep lease (`lease.rs`) and checks that it still does before every step
//! that deletes or rewrites.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use bytes::Bytes;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::index::{IndexJson, PackJson};
use crate::lease::Lease;
use crate::marks::{delete_mark, read_marks, write_mark};
use crate::pack::stored_packs;
use crate::repository::Repository;
use crate::session::sessions;
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
    /// Marked packs past the grace period kept because a live backup session started
    /// before their mark.
    pub waiting: usize,
    /// Stale sessions (backups that died or were paused past the session timeout)
    /// deleted.
    pub stale_sessions: usize,
}

/// Runs both phases, with a grace period of `grace`: at least the repository's.
///
/// # Errors
/// `GraceTooShort` for a grace period below the repository's; storage errors, corrupt
/// snapshots or trees (prune refuses to guess what is used); `Unindexed` when a blob a
/// snapshot uses is in no index object (its pack would look unused), before anything is
/// marked or deleted.
pub async fn prune<S: Storage>(repo: &mut Repository<S>, grace: Duration) -> Result<PruneReport> {
    let min = repo.config.params.grace;
    if grace < min {
        return Err(RepoError::GraceTooShort {
            asked_secs: grace.as_secs(),
            min_secs: min.as_secs(),
        });
    }
    let lease = Lease::acquire(&repo.storage, "prune", &repo.progress).await?;
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
    // Sessions before snapshots: a backup whose session is gone by the time the snapshots
    // are listed wrote its snapshot before it closed the session.
    let now = lease.storage_now().await?;
    let (live, stale) = sessions(
        repo.storage.as_ref(),
        now,
        repo.config.params.session_timeout,
    )
    .await?;
    let oldest_session = live.iter().min().copied();
    // Every index object, kept raw: a blob may be in several packs (two backups stored it
    // at once, or a backup stored again a blob of a marked pack).
    let (snaps, mut indexes) = repo.snapshots_then_index_objects().await?;
    let used = used_blobs(repo, snaps.into_iter().map(|(_, s)| s.tree).collect()).await?;
    let stored = stored_packs(&*repo.storage).await?;
    let marks = read_marks(repo).await?;
    let marked: HashSet<Id> = marks
        .marks
        .iter()
        .flat_map(|(_, m)| m.packs.iter().copied())
        .collect();
    let needed = needed_packs(&indexes, &used, &stored, &marked)?;
    let unused: BTreeSet<Id> = stored
        .keys()
        .filter(|p| !needed.contains(p))
        .copied()
        .collect();

    // Phase 2: old marks.
    let grace_secs = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    let mut pending: HashSet<Id> = HashSet::new();
    let mut deleted: HashSet<Id> = HashSet::new();
    report.ignored_marks = marks.ignored;
    for (name, mark) in marks.marks {
        // The mark's age in storage time; its `time` field is the marking host's clock,
        // for people only.
        let Some(marked_at) = repo.storage.modified(FileType::PruneMark, &name).await? else {
            continue; // gone since it was read: not this run's to act on
        };
        let young = now.saturating_sub(marked_at) < grace_secs;
        let in_use_by_session = oldest_session.is_some_and(|s| s <= marked_at);
        if young || in_use_by_session {
            if !young {
                report.waiting += mark.packs.len();
            }
            pending.extend(mark.packs);
            continue;
        }
        let doomed: BTreeSet<Id> = mark
            .packs
            .iter()
            .filter(|p| unused.contains(p))
            .copied()
            .collect();
        let doomed = last_checks(repo, &indexes, doomed, lease, grace_secs).await?;
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
    // A stale session's backup died, or is paused past the timeout: when it resumes it
    // finds the gap in its refreshes and keeps no snapshot (`session.rs`).
    if !stale.is_empty() {
        lease.check().await?;
    }
    for name in stale {
        repo.storage.delete(FileType::Session, &name).await?;
        report.stale_sessions += 1;
    }
    Ok(report)
}

/// The packs that hold a used blob, among them a marked pack only for a blob with no copy
/// in a stored unmarked pack (FORMAT.md section 9: which copy a prune keeps). A backup
/// stores again the blobs of marked packs, so their marked copies can then go.
///
/// # Errors
/// `Unindexed` when a used blob is in no index object: its pack would look unused, and
/// deleting it would destroy the blob. Refused before anything is written.
fn needed_packs(
    indexes: &BTreeMap<String, IndexJson>,
    used: &HashSet<Id>,
    stored: &BTreeMap<Id, u64>,
    marked: &HashSet<Id>,
) -> Result<HashSet<Id>> {
    let packs = || indexes.values().flat_map(|idx| idx.packs.iter());
    let mut unindexed = used.clone();
    let mut kept_elsewhere: HashSet<Id> = HashSet::new();
    for p in packs() {
        for b in &p.blobs {
            unindexed.remove(&b.1);
        }
        if stored.contains_key(&p.id) && !marked.contains(&p.id) {
            kept_elsewhere.extend(p.blobs.iter().map(|b| b.1).filter(|b| used.contains(b)));
        }
    }
    if !unindexed.is_empty() {
        let mut blobs: Vec<String> = unindexed.iter().map(Id::to_hex).collect();
        blobs.sort_unstable();
        return Err(RepoError::Unindexed { blobs });
    }
    Ok(packs()
        .filter(|p| {
            p.blobs.iter().any(|b| {
                used.contains(&b.1) && (!marked.contains(&p.id) || !kept_elsewhere.contains(&b.1))
            })
        })
        .map(|p| p.id)
        .collect())
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
/// run read them, or written (again) within the grace period (storage time), is in use by
/// a backup this run cannot see yet (a backup that started before the mark was written
/// and outlived its session's timeout). Returns the packs that may go.
async fn last_checks<S: Storage>(
    repo: &Repository<S>,
    indexes: &BTreeMap<String, IndexJson>,
    mut doomed: BTreeSet<Id>,
    lease: &Lease<S>,
    grace_secs: i64,
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
    let now_secs = lease.storage_now().await?;
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

//! `kura repair index`: rebuilds the index objects (FORMAT.md section 7) from what the
//! packs themselves say, for when an index object is lost, damaged or wrong, or a pack is
//! damaged and its blobs must stop being reused.
//!
//! Each stored pack is indexed from its own header, except that an entry of an index
//! object that read cleanly is trusted when the pack's stored size is the size its
//! entries give (as restic's `repair index` does); with `read_data` every pack is read
//! whole and only packs whose every blob hashes to its ID are indexed. Packs that are not
//! stored, and packs whose header or data does not read, are left out, and named. The new
//! index objects are written first and the old ones (those this run read or could not
//! read) deleted after, so that no moment lacks an entry for a pack that is indexed. No
//! pack is ever deleted here: a pack left out by mistake (a read that failed for a passing
//! reason) only makes a backup store its blobs again, or prune refuse (a used blob is not
//! indexed), until the next `repair index`. It holds the upkeep lease, so no prune or
//! forget rewrites the index meanwhile; backups may run: index objects they write after
//! the listing are not touched, and their packs not yet indexed are indexed here too.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::index::{INDEX_BLOBS, IndexJson, PackJson};
use crate::lease::Lease;
use crate::pack::{read_header, read_verified, size_of, stored_packs};
use crate::repository::Repository;
use crate::storage::{FileType, Storage};

/// What `repair index` did.
#[derive(Debug, Default)]
pub struct RepairIndexReport {
    /// Packs indexed by the new index objects.
    pub packs: usize,
    /// Of them, packs whose header (or, with `read_data`, whole content) was read.
    pub packs_read: usize,
    /// Of them, packs that no index object that read listed as stored.
    pub added: Vec<Id>,
    /// Packs an index object listed that are not stored: left out.
    pub missing: Vec<Id>,
    /// Packs whose header or data did not read or verify, with why: left out.
    pub damaged: Vec<(Id, String)>,
    /// Index objects that did not read or did not match their name: replaced.
    pub unreadable_indexes: Vec<String>,
    /// Index objects written.
    pub written: usize,
    /// Index objects deleted.
    pub removed: usize,
}

/// Rebuilds the index. The repository may have been opened with
/// [`Repository::open_unindexed`]; its in-memory index is loaded afresh at the end.
///
/// # Errors
/// `Busy` when a prune or forget holds the upkeep lease; `LeaseLost`; storage errors
/// listing or writing (a pack or index object that does not read is reported instead).
pub async fn repair_index<S: Storage>(
    repo: &mut Repository<S>,
    read_data: bool,
) -> Result<RepairIndexReport> {
    let lease = Lease::acquire(&repo.storage, "repair index", &repo.progress).await?;
    let result = repair_holding(repo, read_data, &lease).await;
    let released = lease.release().await;
    let report = result?;
    released?;
    repo.load_index().await?;
    Ok(report)
}

async fn repair_holding<S: Storage>(
    repo: &Repository<S>,
    read_data: bool,
    lease: &Lease<S>,
) -> Result<RepairIndexReport> {
    let mut report = RepairIndexReport::default();
    // Index objects first, then packs: a pack a backup indexes meanwhile is listed too.
    let mut old_names = Vec::new();
    let mut trusted: BTreeMap<Id, PackJson> = BTreeMap::new();
    let mut listed: Vec<Id> = Vec::new();
    for (name, _) in repo.storage.list(FileType::Index).await? {
        match read_index(repo, &name).await {
            Ok(Some(json)) => {
                for p in json.packs {
                    listed.push(p.id);
                    trusted.entry(p.id).or_insert(p);
                }
            }
            Ok(None) => continue, // gone since the listing: a backup's own is not deleted
            Err(why) => report.unreadable_indexes.push(format!("{name}: {why}")),
        }
        old_names.push(name);
    }
    let stored = stored_packs(&*repo.storage).await?;
    listed.sort_unstable();
    listed.dedup();
    report.missing = listed
        .iter()
        .filter(|p| !stored.contains_key(p))
        .copied()
        .collect();

    let mut packs: Vec<PackJson> = Vec::new();
    for (&pack, &size) in &stored {
        let known = trusted
            .remove(&pack)
            .filter(|p| !read_data && size_of_listed(p) == Some(size));
        let json = if let Some(json) = known {
            json
        } else {
            let read = if read_data {
                read_verified(&*repo.storage, &repo.config.id_key, &pack).await
            } else {
                read_header(&*repo.storage, &pack, size).await
            };
            match read {
                Ok(entries) if read_data || size_of(&entries) == size => {
                    report.packs_read += 1;
                    if listed.binary_search(&pack).is_err() {
                        report.added.push(pack);
                    }
                    PackJson::new(pack, &entries)
                }
                Ok(entries) => {
                    let why = format!(
                        "{size} bytes stored, its header accounts for {}",
                        size_of(&entries)
                    );
                    report.damaged.push((pack, why));
                    continue;
                }
                Err(e) => {
                    report.damaged.push((pack, e.to_string()));
                    continue;
                }
            }
        };
        packs.push(json);
    }
    report.packs = packs.len();

    lease.check().await?;
    let mut written = Vec::new();
    let mut batch = IndexJson::default();
    let mut blobs = 0;
    for pack in packs {
        blobs += pack.blobs.len();
        batch.packs.push(pack);
        if blobs >= INDEX_BLOBS {
            written.push(write_index(repo, std::mem::take(&mut batch)).await?);
            blobs = 0;
        }
    }
    if !batch.packs.is_empty() {
        written.push(write_index(repo, batch).await?);
    }
    report.written = written.len();
    if let Err(e) = lease.check().await {
        withdraw(repo, &written).await;
        return Err(e);
    }
    let written: Vec<String> = written.into_iter().map(|(name, _)| name).collect();
    for name in old_names {
        // Content-named: an old object with exactly the new content is the new object.
        if !written.contains(&name) {
            repo.storage.delete(FileType::Index, &name).await?;
            report.removed += 1;
        }
    }
    Ok(report)
}

/// The stored size an index entry implies (its blobs, header and tail), `None` when
/// an offset does not follow from the lengths before it.
fn size_of_listed(pack: &PackJson) -> Option<u64> {
    let mut offset = 0u64;
    for b in &pack.blobs {
        if b.2 != offset {
            return None;
        }
        offset += u64::from(b.3);
    }
    let header = pack.blobs.len() * crate::pack::ENTRY_SIZE + crate::pack::TAIL_SIZE;
    Some(offset + header as u64)
}

/// One index object: `Ok(None)` when it is gone, `Err(why)` when it does not read, does
/// not match its name, or does not parse.
async fn read_index<S: Storage>(
    repo: &Repository<S>,
    name: &str,
) -> std::result::Result<Option<IndexJson>, String> {
    let bytes = match repo.storage.get(FileType::Index, name).await {
        Ok(bytes) => bytes,
        Err(RepoError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if repo.config.id_key.id(&bytes).to_hex() != name {
        return Err("content does not match its name".into());
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Stores one index object and returns its name.
/// Writes `json` as an index object; returns its name and the packs it lists.
async fn write_index<S: Storage>(
    repo: &Repository<S>,
    json: IndexJson,
) -> Result<(String, Vec<Id>)> {
    let bytes = serde_json::to_vec(&json).expect("index serializes");
    let name = repo.config.id_key.id(&bytes).to_hex();
    repo.storage
        .put(FileType::Index, &name, Bytes::from(bytes))
        .await?;
    Ok((name, json.packs.iter().map(|p| p.id).collect()))
}

/// After the lease was lost while this run wrote (it was paused past the lease's lifetime
/// and a prune took over): deletes the objects it wrote that name a pack no longer stored,
/// which later backups would otherwise rely on; also one whose content (and so name) an
/// older object had: its other packs' blobs then look unindexed, which prune refuses and
/// a backup stores again, where a name of a deleted pack would be trusted. Best effort:
/// `check` names what is left.
async fn withdraw<S: Storage>(repo: &Repository<S>, written: &[(String, Vec<Id>)]) {
    let Ok(stored) = stored_packs(&*repo.storage).await else {
        return;
    };
    for (name, packs) in written {
        if packs.iter().any(|p| !stored.contains_key(p)) {
            let _ = repo.storage.delete(FileType::Index, name).await;
        }
    }
}

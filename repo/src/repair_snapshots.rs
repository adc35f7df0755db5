//! `kura repair snapshots`: for every snapshot that uses a blob the repository no longer
//! has (in no index object, or in a pack that is not stored), a new snapshot without it,
//! so that the rest of its files stay restorable and prune can run again (FORMAT.md
//! section 9.4).
//!
//! A file whose missing chunks form one run gets zeros of exactly their length in their
//! place (`{"zero": N}`): it keeps its size and every surviving byte its offset, which
//! matters for disk images. A file missing several separate runs cannot know where the
//! survivors lie, and keeps them in order without the missing chunks, as restic does. A
//! directory whose listing is lost becomes an empty directory. Every such path is named in
//! the new snapshot's `errors`, which is tagged `repaired`. The originals stay unless
//! `forget` is asked (then each is deleted once its replacement is stored).
//!
//! A blob is lost only when no index object lists it in a stored pack: where the loaded
//! index keeps a copy in a pack that is gone and another index object lists one that is
//! stored, the trees read it there and the files keep it.
//!
//! It holds the upkeep lease, so no prune runs meanwhile: the blobs the new trees name are
//! those the originals already use, and nothing can delete them before the new snapshots
//! are stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt as _;

use bytes::Bytes;

use crate::blob::{BlobType, Compressors};
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::index::{IndexJson, PackJson};
use crate::lease::Lease;
use crate::pack::{PackWriter, stored_packs};
use crate::repository::Repository;
use crate::snapshot::Snapshot;
use crate::storage::{FileType, Storage};
use crate::tree::{Content, Depth, NodeType, Tree};

/// The tag a repaired snapshot carries.
pub const REPAIRED_TAG: &str = "repaired";

/// What `repair snapshots` did.
#[derive(Debug, Default)]
pub struct RepairSnapshotsReport {
    /// `(original, replacement)` for each snapshot repaired.
    pub repaired: Vec<(Id, Id)>,
    /// Originals deleted (with `forget`).
    pub forgotten: usize,
    /// `snapshot SHORT: path: what was lost`, one line each.
    pub lost: Vec<String>,
    /// Blobs whose loaded index entry is in a pack that is not stored, found in another
    /// stored pack that an index object lists: not lost, but a restore reads the entry it
    /// loaded until `repair index` drops the missing pack.
    pub read_elsewhere: usize,
}

/// Repairs every snapshot that uses a missing blob; with `forget`, deletes the originals.
///
/// # Errors
/// `Busy` when a prune or forget holds the upkeep lease; storage errors; a snapshot or
/// tree that reads but does not parse.
pub async fn repair_snapshots<S: Storage>(
    repo: &mut Repository<S>,
    forget: bool,
) -> Result<RepairSnapshotsReport> {
    let lease = Lease::acquire(&repo.storage, "repair snapshots", &repo.progress).await?;
    let result = repair_holding(repo, forget, &lease).await;
    let released = lease.release().await;
    let report = result?;
    released?;
    Ok(report)
}

async fn repair_holding<S: Storage>(
    repo: &mut Repository<S>,
    forget: bool,
    lease: &Lease<S>,
) -> Result<RepairSnapshotsReport> {
    let (snaps, indexes) = repo.snapshots_then_index_objects().await?;
    let stored = stored_packs(&*repo.storage).await?;
    let read_elsewhere = std::sync::Arc::make_mut(&mut repo.index)
        .read_elsewhere(&indexes, |p| stored.contains_key(p))?;
    drop(indexes);
    let mut r = Repairer {
        repo,
        stored,
        trees: HashMap::new(),
        block: None,
        new_trees: BTreeMap::new(),
        lost: Vec::new(),
    };
    let mut replaced: Vec<(Id, Snapshot)> = Vec::new();
    for (id, snap) in snaps {
        r.lost.clear();
        r.block = snap.block.as_ref().map(|b| b.block_size);
        let tree = r.tree(snap.tree, (String::new(), Depth::default())).await?;
        if tree == snap.tree {
            continue;
        }
        let mut new = snap.clone();
        new.tree = tree;
        if !new.tags.iter().any(|t| t == REPAIRED_TAG) {
            new.tags.push(REPAIRED_TAG.into());
        }
        new.errors
            .push(format!("repaired from snapshot {}", id.to_hex()));
        new.errors.extend(r.lost.iter().cloned());
        replaced.push((id, new));
    }
    let mut report = RepairSnapshotsReport {
        read_elsewhere,
        ..RepairSnapshotsReport::default()
    };
    if replaced.is_empty() {
        return Ok(report);
    }
    lease.check().await?;
    r.store_trees(lease).await?;
    for (old, snap) in replaced {
        let bytes = serde_json::to_vec_pretty(&snap).expect("snapshot serializes");
        let id = r.repo.config.id_key.id(&bytes);
        // Paused since the trees were stored and taken over: a prune may have deleted them.
        lease.check().await?;
        r.repo
            .storage
            .put(FileType::Snapshot, &id.to_hex(), Bytes::from(bytes))
            .await?;
        report.lost.extend(
            snap.errors
                .iter()
                .skip(1)
                .map(|e| format!("snapshot {}: {e}", old.short())),
        );
        report.repaired.push((old, id));
        if forget {
            lease.check().await?;
            r.repo
                .storage
                .delete(FileType::Snapshot, &old.to_hex())
                .await?;
            report.forgotten += 1;
        }
    }
    Ok(report)
}

struct Repairer<'a, S: Storage> {
    repo: &'a mut Repository<S>,
    stored: BTreeMap<Id, u64>,
    /// Each tree repaired so far, and whether in a block backup (below): its replacement
    /// (itself when whole), and what was lost under it.
    trees: HashMap<(Id, Option<u64>), (Id, Vec<String>)>,
    /// The block size of the snapshot being repaired, if it is a block backup: its image's
    /// lost blocks become holes in place (their length is the block size), so that the
    /// blocks after them stay at their offsets.
    block: Option<u64>,
    /// New tree blobs to store, by ID.
    new_trees: BTreeMap<Id, Vec<u8>>,
    /// What the current snapshot lost.
    lost: Vec<String>,
}

impl<S: Storage> Repairer<'_, S> {
    /// Whether a blob can be read: indexed, in a stored pack (the index was moved to a
    /// stored copy wherever an index object lists one).
    fn usable(&self, id: &Id) -> bool {
        self.repo
            .index
            .get(id)
            .is_some_and(|l| self.stored.contains_key(&l.pack))
    }

    /// The replacement of tree `id` at `path`, `depth` below the top (itself when nothing
    /// under it is lost).
    async fn tree(&mut self, id: Id, (path, depth): (String, Depth)) -> Result<Id> {
        if let Some((done, lost)) = self.trees.get(&(id, self.block)) {
            self.lost.extend(lost.iter().cloned());
            return Ok(*done);
        }
        let start = self.lost.len();
        // A tree that is indexed in a stored pack but does not read is an error, not a
        // loss: `repair index --read-data` first leaves damaged packs out.
        if !self.usable(&id) {
            self.lost.push(format!(
                "{}: directory listing lost, now empty",
                shown(&path)
            ));
            let empty = self.add_tree(&Tree { nodes: Vec::new() });
            self.trees
                .insert((id, self.block), (empty, self.lost[start..].to_vec()));
            return Ok(empty);
        }
        let mut tree = self.repo.read_tree(&id).await?;
        let mut changed = false;
        for node in &mut tree.nodes {
            let child = format!("{path}/{}", node.name().to_string_lossy());
            match node.kind {
                Some(NodeType::Dir) => {
                    if let Some(sub) = node.subtree {
                        let below = depth
                            .below(node.name().as_bytes())
                            .map_err(|why| RepoError::Invalid(format!("{child}: {why}")))?;
                        let new = Box::pin(self.tree(sub, (child, below))).await?;
                        if new != sub {
                            node.subtree = Some(new);
                            changed = true;
                        }
                    }
                }
                Some(NodeType::File) => {
                    if let Some(content) = node.content.take() {
                        let (content, size, what) = self.file(content, node.size);
                        if let Some(what) = what {
                            self.lost.push(format!("{child}: {what}"));
                            node.size = Some(size);
                            changed = true;
                        }
                        node.content = Some(content);
                    }
                }
                _ => {}
            }
        }
        let new = if changed { self.add_tree(&tree) } else { id };
        self.trees
            .insert((id, self.block), (new, self.lost[start..].to_vec()));
        Ok(new)
    }

    /// A file's content without its missing chunks, its new size, and what was lost.
    fn file(
        &self,
        content: Vec<Content>,
        size: Option<u64>,
    ) -> (Vec<Content>, u64, Option<String>) {
        let len = |c: &Content| match c {
            Content::Blob { blob } => self.repo.index.get(blob).map(|l| u64::from(l.raw_length)),
            Content::Zero { zero } => Some(*zero),
        };
        let missing: Vec<usize> = content
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, Content::Blob { blob } if !self.usable(blob)))
            .map(|(i, _)| i)
            .collect();
        let known: u64 = content.iter().filter_map(len).sum();
        let Some((&first, &last)) = missing.first().zip(missing.last()) else {
            return (content, known, None);
        };
        let one_run = last - first + 1 == missing.len();
        let old_size = size.unwrap_or(known);
        // Lengths of blobs that are gone from the index are unknown; one run's total is not.
        let run_len = old_size.saturating_sub(
            content
                .iter()
                .enumerate()
                .filter(|(i, _)| !missing.contains(i))
                .filter_map(|(_, c)| len(c))
                .sum(),
        );
        let lost_chunks = missing.len();
        if let Some(block) = self.block {
            // Every block's blob holds `block` bytes but the last one's, which holds
            // what is left of the image.
            let mut out = Vec::with_capacity(content.len());
            let mut at = 0u64;
            for c in content {
                let len = match &c {
                    Content::Zero { zero } => *zero,
                    Content::Blob { .. } => block.min(old_size.saturating_sub(at)),
                };
                match c {
                    Content::Blob { blob } if self.usable(&blob) => {
                        out.push(Content::Blob { blob });
                    }
                    _ => crate::blocks::push_entry(&mut out, len, None),
                }
                at += len;
            }
            let what =
                format!("{lost_chunks} block(s), {run_len} bytes, lost: zeros in their place");
            return (out, old_size, Some(what));
        }
        if one_run {
            let mut out: Vec<Content> = content[..first].to_vec();
            out.push(Content::Zero { zero: run_len });
            out.extend_from_slice(&content[last + 1..]);
            let what =
                format!("{lost_chunks} chunk(s), {run_len} bytes, lost: zeros in their place");
            (out, old_size, Some(what))
        } else {
            let skip: HashSet<usize> = missing.into_iter().collect();
            let out: Vec<Content> = content
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !skip.contains(i))
                .map(|(_, c)| c)
                .collect();
            let new_size = old_size - run_len;
            let what = format!(
                "{lost_chunks} chunk(s) in separate runs, {run_len} bytes, lost: left out, the file is that much shorter"
            );
            (out, new_size, Some(what))
        }
    }

    /// Queues a new tree blob and returns its ID.
    fn add_tree(&mut self, tree: &Tree) -> Id {
        let json = serde_json::to_vec(tree).expect("tree serializes");
        let id = self.repo.config.id_key.id(&json);
        if !self.usable(&id) {
            self.new_trees.entry(id).or_insert(json);
        }
        id
    }

    /// Stores the new trees: packs of at most the pack size, then one index object over
    /// them, before any snapshot that names them.
    /// Stores the new trees in packs and one index object over them, which is deleted
    /// again unless the lease is still held once it is written: until a snapshot uses
    /// them the packs look unused, and a prune that took the lease over from this run
    /// (paused past its lifetime) may have deleted them; an index object naming them
    /// would make later backups rely on packs that are gone.
    async fn store_trees(&mut self, lease: &Lease<S>) -> Result<()> {
        let mut zstd = Compressors::new()?;
        let pack_size = self.repo.config.params.pack_size;
        let mut index = IndexJson::default();
        let mut pack = PackWriter::default();
        let mut filled = 0u64;
        for (id, json) in std::mem::take(&mut self.new_trees) {
            let (compression, compressed) = zstd.compress(BlobType::Tree, &json);
            let stored = compressed.as_deref().unwrap_or(&json);
            let raw = u32::try_from(json.len())
                .map_err(|_| RepoError::Invalid("a repaired tree over 4 GiB".into()))?;
            pack.add(BlobType::Tree, id, compression, stored, raw);
            filled += stored.len() as u64;
            if filled >= u64::from(pack_size) {
                index
                    .packs
                    .push(self.put_pack(std::mem::take(&mut pack)).await?);
                filled = 0;
            }
        }
        if !pack.is_empty() {
            index.packs.push(self.put_pack(pack).await?);
        }
        let bytes = serde_json::to_vec(&index).expect("index serializes");
        let name = self.repo.config.id_key.id(&bytes).to_hex();
        self.repo
            .storage
            .put(FileType::Index, &name, Bytes::from(bytes))
            .await?;
        if let Err(e) = lease.check().await {
            // Best effort: if this fails too, `check` names the missing packs.
            let _ = self.repo.storage.delete(FileType::Index, &name).await;
            return Err(e);
        }
        let repo = &mut *self.repo;
        repo.index_loaded_from(vec![name]);
        let loaded = std::sync::Arc::make_mut(&mut repo.index);
        for p in &index.packs {
            loaded.add_pack(p, "repair snapshots")?;
        }
        Ok(())
    }

    async fn put_pack(&self, pack: PackWriter) -> Result<PackJson> {
        let (id, bytes, entries) = pack.finish(&self.repo.config.id_key);
        self.repo
            .storage
            .put(FileType::Pack, &id.to_hex(), Bytes::from(bytes))
            .await?;
        Ok(PackJson::new(id, &entries))
    }
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

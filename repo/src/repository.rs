//! An opened repository: a `Repository` exists only once its config has been read and its
//! index loaded, so nothing can write blobs into a repository it has not checked.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};

use crate::blob::{self, BlobType};
use crate::config::{Config, Params};
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::index::{Index, IndexJson};
use crate::progress::Progress;
use crate::select::{self, SnapshotFilter};
use crate::snapshot::Snapshot;
use crate::storage::{FileType, Storage};
use crate::tree::Tree;

/// A run of trees read with one range GET ([`Repository::read_trees`]) spans at most this
/// many stored bytes and holds at most `TREES_PER_RUN` trees: the backup's and the
/// restore's walks read a directory's subdirectories' trees ahead in such runs, a few at
/// a time, and hold what they read until they come to it.
pub(crate) const TREE_RUN_SPAN: u64 = 512 << 10;

/// See [`TREE_RUN_SPAN`].
pub(crate) const TREES_PER_RUN: usize = 32;

/// An opened repository.
pub struct Repository<S: Storage> {
    pub(crate) storage: Arc<S>,
    pub(crate) config: Arc<Config>,
    pub(crate) index: Arc<Index>,
    /// The index objects `index` was loaded from (sorted): content-addressed, so the same
    /// names listed again mean the same index.
    index_names: Arc<Vec<String>>,
    pub(crate) progress: Arc<Progress>,
}

/// Times `load_index` lists the index objects again when one it listed is gone by the time
/// it reads it (a prune writes the replacement of an index object before it deletes it, so
/// a new listing has the replacement).
const LIST_AGAIN: usize = 3;

/// Snapshot objects read at once (each a few KiB) by [`Repository::snapshots`].
const SNAPSHOTS_AT_ONCE: usize = 32;

/// Index objects read at once (each up to [`crate::index::INDEX_BLOBS`] entries, about
/// 2 MiB of JSON).
const INDEX_AT_ONCE: usize = 8;

/// A cheap copy sharing storage, config and the index as loaded: for work on another
/// thread (a backup's reader), never for writing the index.
impl<S: Storage> Clone for Repository<S> {
    fn clone(&self) -> Self {
        Self {
            storage: self.storage.clone(),
            config: self.config.clone(),
            index: self.index.clone(),
            index_names: self.index_names.clone(),
            progress: self.progress.clone(),
        }
    }
}

impl<S: Storage> Repository<S> {
    /// Creates a repository (writes `config`) and opens it.
    ///
    /// # Errors
    /// `AlreadyExists` when there is a `config`; storage errors.
    pub async fn init(storage: S, params: Params) -> Result<Self> {
        // The look first gives the common case (a repository is there) its clear error
        // without writing; the conditional create settles a race between two inits: of
        // two nodes running "init if missing" exactly one writes `config`, and the other's
        // ID key, which would make the winner's snapshots unverifiable, is never stored.
        if storage.exists(FileType::Config, "").await? {
            return Err(RepoError::AlreadyExists);
        }
        let config = Config::new(params)?;
        let json = config.to_json();
        if !storage
            .create(FileType::Config, "", Bytes::from(json.clone()))
            .await?
        {
            return Err(RepoError::AlreadyExists);
        }
        // A store that ignores `If-None-Match` (B2 does not document it) would let the last
        // writer win: reading back what is stored catches the loser whose write landed
        // first.
        if storage.get(FileType::Config, "").await?.as_ref() != json.as_slice() {
            return Err(RepoError::AlreadyExists);
        }
        Ok(Self {
            storage: Arc::new(storage),
            config: Arc::new(config),
            index: Arc::default(),
            index_names: Arc::default(),
            progress: Arc::default(),
        })
    }

    /// Opens an existing repository: reads `config` and every index object.
    ///
    /// # Errors
    /// `NotFound` when there is no repository; storage errors; corrupt objects.
    pub async fn open(storage: S) -> Result<Self> {
        let mut repo = Self::open_unindexed(storage).await?;
        repo.load_index().await?;
        Ok(repo)
    }

    /// Opens an existing repository without reading the index (for `kura repair index`,
    /// which must open a repository whose index objects do not all read).
    ///
    /// # Errors
    /// `NotFound` when there is no repository; storage errors; a corrupt `config`.
    pub async fn open_unindexed(storage: S) -> Result<Self> {
        let config = match storage.get(FileType::Config, "").await {
            Ok(b) => Config::from_json(&b)?,
            Err(RepoError::NotFound(_)) => {
                return Err(RepoError::NotFound(
                    "no repository here (run kura init)".into(),
                ));
            }
            Err(e) => return Err(e),
        };
        Ok(Self {
            storage: Arc::new(storage),
            config: Arc::new(config),
            index: Arc::default(),
            index_names: Arc::default(),
            progress: Arc::default(),
        })
    }

    /// Lists the snapshots, then reloads the index, in that order: a backup writes its index
    /// objects before its snapshot, so every snapshot returned has its blobs in the index
    /// even while other backups are writing. For `check` and `prune` beside running backups.
    ///
    /// # Errors
    /// As [`Repository::snapshots`] and [`Repository::open`].
    pub async fn snapshots_then_index(&mut self) -> Result<Vec<(Id, Snapshot)>> {
        Ok(self.snapshots_then_index_objects().await?.0)
    }

    /// As [`Repository::snapshots_then_index`], also returning the index objects read, by
    /// name (prune needs every location of a blob, which the index keeps one of).
    pub(crate) async fn snapshots_then_index_objects(
        &mut self,
    ) -> Result<(Vec<(Id, Snapshot)>, BTreeMap<String, IndexJson>)> {
        let snaps = self.snapshots().await?;
        let objects = self.load_index().await?;
        Ok((snaps, objects))
    }

    /// Reads every index object (each checked against its name) and makes them the index.
    /// One that is gone between the listing and its read makes it list again (up to
    /// `LIST_AGAIN` times), keeping the objects already read.
    pub(crate) async fn load_index(&mut self) -> Result<BTreeMap<String, IndexJson>> {
        self.load_index_listed(None).await
    }

    /// As [`Repository::load_index`], starting from `listed` (sorted) if the caller has
    /// just listed the index objects.
    async fn load_index_listed(
        &mut self,
        mut listed: Option<Vec<String>>,
    ) -> Result<BTreeMap<String, IndexJson>> {
        let mut read: BTreeMap<String, IndexJson> = BTreeMap::new();
        let mut again = 0;
        let names = 'list: loop {
            let mut names = match listed.take() {
                Some(names) => names,
                None => self.index_names_listed().await?,
            };
            // Read at once: every backup and restore opens with them all, and a far store
            // answers each in a round trip.
            let storage = &self.storage;
            let unread: Vec<String> = names
                .iter()
                .filter(|n| !read.contains_key(*n))
                .cloned()
                .collect();
            let mut fetched = futures::stream::iter(unread)
                .map(|name| async move {
                    let got = storage.get(FileType::Index, &name).await;
                    (name, got)
                })
                .buffer_unordered(INDEX_AT_ONCE);
            let mut gone = false;
            while let Some((name, got)) = fetched.next().await {
                let bytes = match got {
                    Err(RepoError::NotFound(_)) if again < LIST_AGAIN => {
                        gone = true;
                        continue;
                    }
                    got => got?,
                };
                let what = format!("index/{name}");
                if self.config.id_key.id(&bytes).to_hex() != *name {
                    return Err(RepoError::corrupt(what, "content does not match its name"));
                }
                let json: IndexJson =
                    serde_json::from_slice(&bytes).map_err(|e| RepoError::corrupt(&what, e))?;
                read.insert(name, json);
            }
            drop(fetched);
            if gone {
                again += 1;
                continue 'list;
            }
            read.retain(|name, _| names.binary_search(name).is_ok());
            names.shrink_to_fit();
            break names;
        };
        let mut index = Index::default();
        for (name, json) in &read {
            for pack in &json.packs {
                index.add_pack(pack, &format!("index/{name}"))?;
            }
        }
        self.index = Arc::new(index);
        self.index_names = Arc::new(names);
        Ok(read)
    }

    /// Loads the index again unless the index objects listed now are those it was loaded
    /// from (a backup opened a while ago must see what prunes did since).
    pub(crate) async fn refresh_index(&mut self) -> Result<()> {
        let listed = self.index_names_listed().await?;
        if listed == *self.index_names {
            return Ok(());
        }
        self.load_index_listed(Some(listed)).await.map(drop)
    }

    /// Records that the index now also holds the index objects `names` (this handle wrote
    /// them and added their packs).
    pub(crate) fn index_loaded_from(&mut self, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        let all = Arc::make_mut(&mut self.index_names);
        all.extend(names);
        all.sort_unstable();
        all.dedup();
    }

    /// The names of the index objects, sorted.
    async fn index_names_listed(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = (self.storage.list(FileType::Index).await?)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The index of all blobs.
    #[must_use]
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Live counters of the backup or restore running on this handle (shared by its
    /// clones), for display.
    #[must_use]
    pub fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    /// The storage.
    #[must_use]
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Reads a blob, decompresses it and checks that it hashes to its ID.
    ///
    /// # Errors
    /// `NotFound` for an unknown blob; `Corrupt` when it does not verify.
    pub async fn read_blob(&self, id: &Id) -> Result<Vec<u8>> {
        let loc = self
            .index
            .get(id)
            .ok_or_else(|| RepoError::NotFound(format!("blob {}", id.short())))?;
        let what = format!("blob {} in pack {}", id.short(), loc.pack.short());
        let stored = self
            .storage
            .get_range(
                FileType::Pack,
                &loc.pack.to_hex(),
                loc.offset,
                u64::from(loc.length),
            )
            .await?;
        let raw = blob::decompress_owned(&what, loc.compression, stored, loc.raw_length as usize)?;
        if self.config.id_key.id(&raw) != *id {
            return Err(RepoError::corrupt(what, "content does not hash to its ID"));
        }
        Ok(raw)
    }

    /// Reads blobs that lie one after another in one pack (as [`Repository::run_of`]
    /// groups them) with a single range GET, each checked against its ID. Uncompressed
    /// blobs are slices of the one buffer read.
    ///
    /// # Errors
    /// As `read_blob`; `Invalid` when the blobs are not one run.
    pub async fn read_run(&self, ids: &[Id]) -> Result<Vec<Bytes>> {
        let mut locs = Vec::with_capacity(ids.len());
        for id in ids {
            let loc = self
                .index
                .get(id)
                .ok_or_else(|| RepoError::NotFound(format!("blob {}", id.short())))?;
            locs.push(*loc);
        }
        let (Some(first), Some(last)) = (locs.first(), locs.last()) else {
            return Ok(Vec::new());
        };
        let contiguous = locs
            .windows(2)
            .all(|w| w[1].pack == w[0].pack && w[1].offset == w[0].offset + u64::from(w[0].length));
        if !contiguous {
            return Err(RepoError::Invalid("blobs are not one run in a pack".into()));
        }
        let start = first.offset;
        let span = last.offset + u64::from(last.length) - start;
        let stored = self
            .storage
            .get_range(FileType::Pack, &first.pack.to_hex(), start, span)
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for (id, loc) in ids.iter().zip(&locs) {
            let what = format!("blob {} in pack {}", id.short(), loc.pack.short());
            let at = usize::try_from(loc.offset - start).unwrap_or(usize::MAX);
            let piece = stored.slice(at..at + loc.length as usize);
            let raw = match loc.compression {
                blob::Compression::None => piece,
                blob::Compression::Zstd => Bytes::from(blob::decompress(
                    &what,
                    loc.compression,
                    &piece,
                    loc.raw_length as usize,
                )?),
            };
            if self.config.id_key.id(&raw) != *id {
                return Err(RepoError::corrupt(what, "content does not hash to its ID"));
            }
            out.push(raw);
        }
        Ok(out)
    }

    /// How many of `ids`, from the first, make one run for [`Repository::read_run`]: next to
    /// each other in one pack and at most `max_span` bytes stored (always at least one
    /// when there is one). Reads `ids` only as far as the run goes.
    pub fn run_of<'a>(&self, ids: impl IntoIterator<Item = &'a Id>, max_span: u64) -> usize {
        let mut ids = ids.into_iter();
        let Some(first) = ids.next() else { return 0 };
        let Some(first) = self.index.get(first) else {
            return 1;
        };
        let mut end = first.offset + u64::from(first.length);
        let mut n = 1;
        for id in ids {
            match self.index.get(id) {
                Some(l)
                    if l.pack == first.pack
                        && l.offset == end
                        && end + u64::from(l.length) - first.offset <= max_span =>
                {
                    end += u64::from(l.length);
                    n += 1;
                }
                _ => break,
            }
        }
        n
    }

    /// Reads a tree blob.
    ///
    /// # Errors
    /// As `read_blob`, or when the JSON does not parse.
    pub async fn read_tree(&self, id: &Id) -> Result<Tree> {
        self.check_tree(id)?;
        let raw = self.read_blob(id).await?;
        parse_tree(id, &raw)
    }

    /// Reads trees that lie one after another in one pack (as [`Repository::run_of`]
    /// groups them) with a single range GET: one answer per ID, in order (callers pair
    /// them by position). If the run cannot be read whole (a damaged blob in it, say),
    /// each tree is read alone, so that one bad tree fails only its own directory.
    pub async fn read_trees(&self, ids: &[Id]) -> Vec<Result<Tree>> {
        let whole = async {
            for id in ids {
                self.check_tree(id)?;
            }
            let raws = self.read_run(ids).await?;
            ids.iter()
                .zip(&raws)
                .map(|(id, raw)| parse_tree(id, raw))
                .collect::<Result<Vec<Tree>>>()
        };
        match whole.await {
            Ok(trees) if trees.len() == ids.len() => trees.into_iter().map(Ok).collect(),
            _ if ids.len() > 1 => {
                let mut each = Vec::with_capacity(ids.len());
                for id in ids {
                    each.push(self.read_tree(id).await);
                }
                each
            }
            Err(e) => vec![Err(e)],
            Ok(_) => ids
                .iter()
                .map(|id| {
                    Err(RepoError::corrupt(
                        format!("tree {}", id.short()),
                        "not read with its run",
                    ))
                })
                .collect(),
        }
    }

    /// Refuses an ID the index holds as a data blob where a tree is wanted.
    fn check_tree(&self, id: &Id) -> Result<()> {
        if self.index.get(id).is_some_and(|l| l.kind != BlobType::Tree) {
            return Err(RepoError::corrupt(
                format!("tree {}", id.short()),
                "is a data blob",
            ));
        }
        Ok(())
    }

    /// One snapshot, checked against its ID.
    ///
    /// # Errors
    /// `NotFound`, storage errors, or a snapshot that does not match its ID.
    pub async fn load_snapshot(&self, id: &Id) -> Result<Snapshot> {
        let bytes = self.storage.get(FileType::Snapshot, &id.to_hex()).await?;
        if self.config.id_key.id(&bytes) != *id {
            return Err(RepoError::corrupt(
                format!("snapshot {}", id.short()),
                "content does not match its name",
            ));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| RepoError::corrupt(format!("snapshot {}", id.short()), e))
    }

    /// All snapshots, oldest first: by the instant of their time (RFC 3339, any offset),
    /// then by ID; a time that does not parse sorts first, so `latest` is never a guess.
    /// A snapshot listed and then deleted (a `forget` running beside) before it is read is
    /// gone, not an error.
    ///
    /// # Errors
    /// Storage errors; corrupt snapshots.
    pub async fn snapshots(&self) -> Result<Vec<(Id, Snapshot)>> {
        let ids = self
            .storage
            .list(FileType::Snapshot)
            .await?
            .iter()
            .map(|(name, _)| Id::from_hex(name))
            .collect::<Result<Vec<_>>>()?;
        // Every backup reads them all to find its parent: one after another, a far store's
        // round trip each would make that grow with the repository's age.
        let mut out: Vec<(Id, Snapshot)> = futures::stream::iter(ids)
            .map(|id| async move {
                match self.load_snapshot(&id).await {
                    Err(RepoError::NotFound(_)) => Ok(None),
                    got => got.map(|s| Some((id, s))),
                }
            })
            .buffer_unordered(SNAPSHOTS_AT_ONCE)
            .try_filter_map(|found| async move { Ok(found) })
            .try_collect()
            .await?;
        out.sort_by_cached_key(|(id, s)| (s.instant(), *id));
        Ok(out)
    }

    /// The snapshot named by `latest` or a unique prefix of its ID, among all snapshots
    /// (as [`Self::resolve_snapshot`] with no filter).
    ///
    /// # Errors
    /// As [`Self::resolve_snapshot`].
    pub async fn find_snapshot(&self, name: &str) -> Result<(Id, Snapshot)> {
        self.resolve_snapshot(name, &SnapshotFilter::default())
            .await
    }

    /// The snapshot named by `name` among those `filter` matches: a unique prefix of its
    /// ID, or `latest`, the newest, when the snapshots matched are of one host and one set
    /// of paths.
    ///
    /// # Errors
    /// `NotFound` when none or several match; [`RepoError::AmbiguousLatest`] (naming each
    /// group's newest) when `latest` could name the snapshots of several hosts or paths;
    /// storage errors.
    pub async fn resolve_snapshot(
        &self,
        name: &str,
        filter: &SnapshotFilter,
    ) -> Result<(Id, Snapshot)> {
        let mut all = self.snapshots().await?;
        let before = all.len();
        all.retain(|(_, s)| filter.matches(s));
        let filtered = all.len() < before;
        select::resolve(all, name, filtered)
    }
}

/// The tree blob `raw`, whose ID is `id`.
fn parse_tree(id: &Id, raw: &[u8]) -> Result<Tree> {
    serde_json::from_slice(raw).map_err(|e| RepoError::corrupt(format!("tree {}", id.short()), e))
}

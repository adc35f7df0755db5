//! The index (FORMAT.md section 7): which blob is where, in memory and as `index/ID` objects.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::blob::{BlobType, Compression};
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::pack::{BlobLocation, Entry};

/// `INDEX_EVERY`: packs per index object written during a backup.
pub const INDEX_EVERY: usize = 16;
/// `INDEX_BLOBS`: blobs after which an index object is written even before `INDEX_EVERY`
/// packs (packs of small files hold thousands), so that no index object, nor the list a
/// writer keeps for it, grows large.
pub const INDEX_BLOBS: usize = 16_384;

/// `INDEX_INTERVAL`: the longest a backup goes between index objects while it stores
/// packs, so that a backup killed or failed after hours of slow uploads leaves what it
/// stored for the next run to reuse.
pub const INDEX_INTERVAL: std::time::Duration = std::time::Duration::from_mins(5);

/// One row of [`PackJson::blobs`] as a location.
fn location(
    pack: Id,
    &(kind, _, offset, length, raw_length, compression): &(u8, Id, u64, u32, u32, u8),
    what: &str,
) -> Result<BlobLocation> {
    Ok(BlobLocation {
        kind: BlobType::from_u8(kind)
            .ok_or_else(|| RepoError::corrupt(what, "unknown blob type"))?,
        pack,
        offset,
        length,
        raw_length,
        compression: Compression::from_u8(compression)
            .ok_or_else(|| RepoError::corrupt(what, "unknown compression"))?,
    })
}

/// All known blobs.
#[derive(Clone, Default)]
pub struct Index {
    blobs: HashMap<Id, BlobLocation>,
}

/// One pack as an index object lists it.
#[derive(Serialize, Deserialize)]
pub(crate) struct PackJson {
    pub id: Id,
    /// `[type, id, offset, stored_length, raw_length, compression]`.
    pub blobs: Vec<(u8, Id, u64, u32, u32, u8)>,
}

/// An `index/ID` object.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct IndexJson {
    pub packs: Vec<PackJson>,
}

impl PackJson {
    pub(crate) fn new(pack: Id, entries: &[Entry]) -> Self {
        let mut offset = 0u64;
        let blobs = entries
            .iter()
            .map(|e| {
                let row = (
                    e.kind as u8,
                    e.id,
                    offset,
                    e.length,
                    e.raw_length,
                    e.compression as u8,
                );
                offset += u64::from(e.length);
                row
            })
            .collect();
        Self { id: pack, blobs }
    }
}

impl Index {
    /// Where a blob is, if it is known.
    #[must_use]
    pub fn get(&self, id: &Id) -> Option<&BlobLocation> {
        self.blobs.get(id)
    }

    /// Whether a blob is known.
    #[must_use]
    pub fn contains(&self, id: &Id) -> bool {
        self.blobs.contains_key(id)
    }

    /// Number of known blobs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.blobs.len()
    }

    /// Whether no blob is known.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Adds a pack's blobs; a blob already known keeps the location it has (the index
    /// keeps one location per blob, the first one loaded).
    pub(crate) fn add_pack(&mut self, pack: &PackJson, what: &str) -> Result<()> {
        for row in &pack.blobs {
            let location = location(pack.id, row, what)?;
            self.blobs.entry(row.1).or_insert(location);
        }
        Ok(())
    }

    /// Moves each blob whose location is in a pack that is not `stored` to a location in
    /// a stored pack, if one of `indexes` lists one (the same blob stored twice, as two
    /// backups running at once do, and the copy loaded first lost). Returns how many
    /// blobs moved. For the commands that list the packs (`check`, `repair snapshots`):
    /// the index loaded without that list only knows the first copy.
    pub(crate) fn read_elsewhere(
        &mut self,
        indexes: &BTreeMap<String, IndexJson>,
        stored: impl Fn(&Id) -> bool,
    ) -> Result<usize> {
        let mut moved = 0;
        for (name, json) in indexes {
            for pack in json.packs.iter().filter(|p| stored(&p.id)) {
                for row in &pack.blobs {
                    if let Some(known) = self.blobs.get_mut(&row.1)
                        && !stored(&known.pack)
                    {
                        *known = location(pack.id, row, &format!("index/{name}"))?;
                        moved += 1;
                    }
                }
            }
        }
        Ok(moved)
    }

    /// (blobs, bytes before compression, bytes stored) over every known blob.
    #[must_use]
    pub fn totals(&self) -> (u64, u64, u64) {
        self.blobs.values().fold((0, 0, 0), |(n, raw, stored), l| {
            (
                n + 1,
                raw + u64::from(l.raw_length),
                stored + u64::from(l.length),
            )
        })
    }
}

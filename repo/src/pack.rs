//! Packs (FORMAT.md section 6): blobs one after another, then their header, entry count and
//! magic at the end; building one, and reading a stored one's header.

use crate::blob::{BlobType, Compression};
use crate::error::{RepoError, Result};
use crate::id::{ID_SIZE, Id, IdKey};
use crate::storage::{FileType, Storage};

/// `PACK_MAGIC`.
pub const PACK_MAGIC: [u8; 4] = *b"KPK1";
/// `ENTRY_SIZE`: bytes per header entry.
pub const ENTRY_SIZE: usize = 2 + ID_SIZE + 4 + 4;
/// Bytes after the header: entry count and magic.
pub const TAIL_SIZE: usize = 8;

/// Where a blob is: its pack, offset and sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobLocation {
    /// Blob type.
    pub kind: BlobType,
    /// Pack ID.
    pub pack: Id,
    /// Offset in the pack.
    pub offset: u64,
    /// Stored length.
    pub length: u32,
    /// Length after decompression.
    pub raw_length: u32,
    /// How it is stored.
    pub compression: Compression,
}

/// One header entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Blob type.
    pub kind: BlobType,
    /// How it is stored.
    pub compression: Compression,
    /// Blob ID.
    pub id: Id,
    /// Stored length.
    pub length: u32,
    /// Length after decompression.
    pub raw_length: u32,
}

/// Builds one pack in memory; the pack size bounds it.
#[derive(Default)]
pub struct PackWriter {
    data: Vec<u8>,
    entries: Vec<Entry>,
}

impl PackWriter {
    /// A writer filling `buf` (cleared first): a buffer of an earlier pack, so that each
    /// pack does not grow a fresh allocation page by page.
    #[must_use]
    pub fn with_buffer(mut buf: Vec<u8>) -> Self {
        buf.clear();
        Self {
            data: buf,
            entries: Vec::new(),
        }
    }

    /// The writer of a finished pack (`bytes` and `entries` from [`PackWriter::finish`]),
    /// open again for more blobs.
    #[must_use]
    pub fn reopen(mut bytes: Vec<u8>, entries: Vec<Entry>) -> Self {
        let blobs: usize = entries.iter().map(|e| e.length as usize).sum();
        bytes.truncate(blobs);
        Self {
            data: bytes,
            entries,
        }
    }

    /// Whether the pack holds blob `id`.
    #[must_use]
    pub fn contains(&self, id: &Id) -> bool {
        self.entries.iter().any(|e| e.id == *id)
    }

    /// Bytes of blobs so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether no blob was added.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends a stored blob.
    ///
    /// # Panics
    /// When `stored` is 4 GiB or longer (chunks are at most 16 MiB).
    pub fn add(
        &mut self,
        kind: BlobType,
        id: Id,
        compression: Compression,
        stored: &[u8],
        raw_length: u32,
    ) {
        self.entries.push(Entry {
            kind,
            compression,
            id,
            length: u32::try_from(stored.len()).expect("a blob is under 4 GiB"),
            raw_length,
        });
        self.data.extend_from_slice(stored);
    }

    /// The finished pack: its ID, bytes and header entries.
    ///
    /// # Panics
    /// With 4 G entries or more (the pack size bounds them far below that).
    #[must_use]
    pub fn finish(mut self, key: &IdKey) -> (Id, Vec<u8>, Vec<Entry>) {
        for e in &self.entries {
            self.data.push(e.kind as u8);
            self.data.push(e.compression as u8);
            self.data.extend_from_slice(&e.id.0);
            self.data.extend_from_slice(&e.length.to_le_bytes());
            self.data.extend_from_slice(&e.raw_length.to_le_bytes());
        }
        let count = u32::try_from(self.entries.len()).expect("fewer than 4 G entries");
        self.data.extend_from_slice(&count.to_le_bytes());
        self.data.extend_from_slice(&PACK_MAGIC);
        let id = key.id(&self.data);
        (id, self.data, self.entries)
    }
}

/// The number of entries a pack's last `TAIL_SIZE` bytes announce.
///
/// # Errors
/// When the magic is wrong.
pub fn entry_count(what: &str, tail: &[u8]) -> Result<usize> {
    if tail.len() != TAIL_SIZE || tail[4..] != PACK_MAGIC {
        return Err(RepoError::corrupt(what, "not a kura pack (bad magic)"));
    }
    Ok(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as usize)
}

/// Parses a pack header (the `count * ENTRY_SIZE` bytes before the tail).
///
/// # Errors
/// When an entry has an unknown type or compression.
pub fn parse_header(what: &str, header: &[u8]) -> Result<Vec<Entry>> {
    if !header.len().is_multiple_of(ENTRY_SIZE) {
        return Err(RepoError::corrupt(
            what,
            "header length is not a whole number of entries",
        ));
    }
    header
        .chunks(ENTRY_SIZE)
        .map(|e| {
            let kind = BlobType::from_u8(e[0])
                .ok_or_else(|| RepoError::corrupt(what, "unknown blob type"))?;
            let compression = Compression::from_u8(e[1])
                .ok_or_else(|| RepoError::corrupt(what, "unknown compression"))?;
            let mut id = [0u8; ID_SIZE];
            id.copy_from_slice(&e[2..2 + ID_SIZE]);
            let n = |at: usize| u32::from_le_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]]);
            Ok(Entry {
                kind,
                compression,
                id: Id(id),
                length: n(2 + ID_SIZE),
                raw_length: n(6 + ID_SIZE),
            })
        })
        .collect()
}

/// Reads the header of the stored pack `pack` of `size` bytes (from a listing): its tail,
/// then the entries before it, two range GETs.
///
/// # Errors
/// Storage errors; a pack too short for the header its tail announces, or a bad header.
pub(crate) async fn read_header<S: Storage>(
    storage: &S,
    pack: &Id,
    size: u64,
) -> Result<Vec<Entry>> {
    let what = format!("pack {}", pack.short());
    let tail_len = TAIL_SIZE as u64;
    let tail_at = size
        .checked_sub(tail_len)
        .ok_or_else(|| RepoError::corrupt(&what, "too short"))?;
    let name = pack.to_hex();
    let tail = storage
        .get_range(FileType::Pack, &name, tail_at, tail_len)
        .await?;
    let count = entry_count(&what, &tail)?;
    let header_len = (count as u64)
        .checked_mul(ENTRY_SIZE as u64)
        .filter(|n| *n <= tail_at)
        .ok_or_else(|| RepoError::corrupt(&what, "header longer than the pack"))?;
    if header_len == 0 {
        return Ok(Vec::new());
    }
    let header = storage
        .get_range(FileType::Pack, &name, tail_at - header_len, header_len)
        .await?;
    parse_header(&what, &header)
}

/// Reads the stored pack `pack` whole (it is bounded by the pack size), checks it against
/// its name, and verifies that every blob decodes and hashes to its ID. Returns its header.
///
/// # Errors
/// Storage errors; `Corrupt` for a pack that does not match its name, a bad header, or a
/// blob that does not decode or hash to its ID.
pub(crate) async fn read_verified<S: Storage>(
    storage: &S,
    key: &IdKey,
    pack: &Id,
) -> Result<Vec<Entry>> {
    let what = format!("pack {}", pack.short());
    let bytes = storage.get(FileType::Pack, &pack.to_hex()).await?;
    if key.id(&bytes) != *pack {
        return Err(RepoError::corrupt(what, "content does not match its name"));
    }
    let tail_at = bytes
        .len()
        .checked_sub(TAIL_SIZE)
        .ok_or_else(|| RepoError::corrupt(&what, "too short"))?;
    let count = entry_count(&what, &bytes[tail_at..])?;
    let header_at = count
        .checked_mul(ENTRY_SIZE)
        .and_then(|n| tail_at.checked_sub(n))
        .ok_or_else(|| RepoError::corrupt(&what, "header longer than the pack"))?;
    let entries = parse_header(&what, &bytes[header_at..tail_at])?;
    let mut offset = 0usize;
    for e in &entries {
        let end = offset + e.length as usize;
        let stored = bytes
            .get(offset..end)
            .ok_or_else(|| RepoError::corrupt(&what, "blob past the header"))?;
        let raw = crate::blob::decompress(&what, e.compression, stored, e.raw_length as usize)?;
        if key.id(&raw) != e.id {
            return Err(RepoError::corrupt(
                what,
                format!("blob {} does not hash to its ID", e.id.short()),
            ));
        }
        offset = end;
    }
    Ok(entries)
}

/// The stored packs by ID, with their sizes (names that are not IDs are not packs).
///
/// # Errors
/// Storage errors.
pub(crate) async fn stored_packs<S: Storage>(
    storage: &S,
) -> Result<std::collections::BTreeMap<Id, u64>> {
    Ok(storage
        .list(FileType::Pack)
        .await?
        .into_iter()
        .filter_map(|(n, s)| Id::from_hex(&n).ok().map(|id| (id, s)))
        .collect())
}

/// The size of a pack with these header entries: its blobs, header and tail.
#[must_use]
pub(crate) fn size_of(entries: &[Entry]) -> u64 {
    let blobs: u64 = entries.iter().map(|e| u64::from(e.length)).sum();
    blobs + (entries.len() * ENTRY_SIZE + TAIL_SIZE) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_pack_parses_back_to_its_entries() {
        let key = IdKey::generate().unwrap();
        let mut w = PackWriter::default();
        w.add(BlobType::Data, key.id(b"a"), Compression::None, b"a", 1);
        w.add(BlobType::Tree, key.id(b"bb"), Compression::Zstd, b"xyz", 2);
        let (id, bytes, entries) = w.finish(&key);
        assert_eq!(id, key.id(&bytes));
        let tail = &bytes[bytes.len() - TAIL_SIZE..];
        let n = entry_count("p", tail).unwrap();
        let header = &bytes[bytes.len() - TAIL_SIZE - n * ENTRY_SIZE..bytes.len() - TAIL_SIZE];
        assert_eq!(parse_header("p", header).unwrap(), entries);
        assert_eq!(&bytes[..4], b"axyz");
        let mut bad = tail.to_vec();
        bad[7] ^= 1;
        assert!(entry_count("p", &bad).is_err());
    }
}

//! Blob types and compression (FORMAT.md section 5.3).

use crate::error::{RepoError, Result};

/// `PROBE_SIZE`: bytes of a chunk compressed to decide whether the rest is worth it.
pub const PROBE_SIZE: usize = 16 << 10;
/// `PROBE_RATIO`: above this output/input ratio the chunk is stored raw.
pub const PROBE_RATIO: f64 = 0.95;
const LEVEL: i32 = 3;
const PROBE_LEVEL: i32 = 1;

/// What a blob holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlobType {
    /// File or stream content.
    Data = 0,
    /// A directory (tree JSON).
    Tree = 1,
}

impl BlobType {
    pub(crate) fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Data),
            1 => Some(Self::Tree),
            _ => None,
        }
    }
}

/// How a blob is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// As is.
    None = 0,
    /// zstd.
    Zstd = 1,
}

impl Compression {
    pub(crate) fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::None),
            1 => Some(Self::Zstd),
            _ => None,
        }
    }
}

/// zstd contexts, made once per backup: creating one per chunk costs more than
/// compressing a small file.
pub(crate) struct Compressors {
    probe: zstd::bulk::Compressor<'static>,
    full: zstd::bulk::Compressor<'static>,
}

impl Compressors {
    pub(crate) fn new() -> Result<Self> {
        let make =
            |level| zstd::bulk::Compressor::new(level).map_err(|e| RepoError::corrupt("zstd", e));
        Ok(Self {
            probe: make(PROBE_LEVEL)?,
            full: make(LEVEL)?,
        })
    }

    /// The stored form of a blob: zstd when it pays, raw otherwise. A data chunk longer
    /// than `PROBE_SIZE` is probed first; a shorter one is simply compressed once.
    pub(crate) fn compress(
        &mut self,
        kind: BlobType,
        raw: &[u8],
    ) -> (Compression, Option<Vec<u8>>) {
        if kind == BlobType::Data && raw.len() > PROBE_SIZE {
            let probe = &raw[..PROBE_SIZE];
            match self.probe.compress(probe) {
                #[allow(clippy::cast_precision_loss, reason = "a ratio")]
                Ok(out) if (out.len() as f64) <= PROBE_RATIO * probe.len() as f64 => {}
                _ => return (Compression::None, None),
            }
        }
        match self.full.compress(raw) {
            Ok(out) if out.len() < raw.len() => (Compression::Zstd, Some(out)),
            _ => (Compression::None, None),
        }
    }
}

/// The raw bytes of a stored blob read on its own: an uncompressed one is returned
/// without a copy.
pub(crate) fn decompress_owned(
    what: &str,
    compression: Compression,
    stored: bytes::Bytes,
    raw_len: usize,
) -> Result<Vec<u8>> {
    match compression {
        Compression::None => Ok(Vec::from(stored)),
        Compression::Zstd => decompress(what, compression, &stored, raw_len),
    }
}

/// The raw bytes of a stored blob.
pub(crate) fn decompress(
    what: &str,
    compression: Compression,
    stored: &[u8],
    raw_len: usize,
) -> Result<Vec<u8>> {
    match compression {
        Compression::None => Ok(stored.to_vec()),
        Compression::Zstd => {
            let out =
                zstd::bulk::decompress(stored, raw_len).map_err(|e| RepoError::corrupt(what, e))?;
            if out.len() != raw_len {
                return Err(RepoError::corrupt(
                    what,
                    "decompressed length differs from the index",
                ));
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_compressed_and_random_bytes_are_not() {
        let text = b"kura snapshot volume backup ".repeat(5000);
        let mut z = Compressors::new().unwrap();
        let (c, out) = z.compress(BlobType::Data, &text);
        assert_eq!(c, Compression::Zstd);
        let out = out.unwrap();
        assert!(out.len() < text.len() / 10);
        assert_eq!(decompress("t", c, &out, text.len()).unwrap(), text);

        let mut noise = vec![0u8; 200_000];
        kura_keys::rand::fill(&mut noise).unwrap();
        assert_eq!(z.compress(BlobType::Data, &noise).0, Compression::None);
    }
}

//! The `config` object (FORMAT.md section 4).

use serde::{Deserialize, Serialize};

use crate::error::{RepoError, Result};
use crate::id::{Id, IdKey};

/// `version` this program writes and reads.
pub const VERSION: u32 = 1;

/// FastCDC sizes, bytes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ChunkerSizes {
    /// Smallest chunk.
    pub min: u32,
    /// Average chunk.
    pub avg: u32,
    /// Largest chunk.
    pub max: u32,
}

/// Parameters chosen at `kura init`.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// FastCDC sizes for files and streams.
    pub chunker: ChunkerSizes,
    /// Fixed chunk size for block devices and images.
    pub block_size: u32,
    /// Target pack size.
    pub pack_size: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            chunker: ChunkerSizes {
                min: 256 << 10,
                avg: 1 << 20,
                max: 4 << 20,
            },
            block_size: 1 << 20,
            pack_size: 16 << 20,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct ConfigJson {
    version: u32,
    id: String,
    id_key: String,
    chunker: ChunkerSizes,
    block_size: u32,
    pack_size: u32,
    created: String,
}

/// A repository's configuration, with its ID key.
pub struct Config {
    /// Random repository ID (hex), for people and logs.
    pub id: String,
    /// The parameters.
    pub params: Params,
    /// When `kura init` ran (RFC 3339).
    pub created: String,
    pub(crate) id_key: IdKey,
}

impl Config {
    /// A new configuration with a fresh ID key.
    ///
    /// # Errors
    /// When the parameters are out of range or no randomness is available.
    pub fn new(params: Params) -> Result<Self> {
        let c = params.chunker;
        // fastcdc 2020 bounds: 64 B..1 MiB min, 256 B..4 MiB avg, 1 KiB..16 MiB max.
        let in_range = (64..=1 << 20).contains(&c.min)
            && (256..=4 << 20).contains(&c.avg)
            && (1024..=16 << 20).contains(&c.max)
            && c.min <= c.avg
            && c.avg <= c.max;
        if !in_range {
            return Err(RepoError::Invalid(format!(
                "chunker sizes {c:?} out of range (min 64 B-1 MiB, avg 256 B-4 MiB, max 1 KiB-16 MiB, min <= avg <= max)"
            )));
        }
        if params.block_size == 0 || params.pack_size < params.chunker.max {
            return Err(RepoError::Invalid(
                "the block size must be above 0 and the pack size at least the largest chunk"
                    .into(),
            ));
        }
        let id = IdKey::generate()?.id(b"repository id").short();
        Ok(Self {
            id,
            params,
            created: now_rfc3339(),
            id_key: IdKey::generate()?,
        })
    }

    /// The ID that names an object (index, snapshot, prune mark) with these bytes: the
    /// repository's keyed hash of them (FORMAT.md section 3).
    #[must_use]
    pub fn object_id(&self, bytes: &[u8]) -> Id {
        self.id_key.id(bytes)
    }

    pub(crate) fn to_json(&self) -> Vec<u8> {
        let json = ConfigJson {
            version: VERSION,
            id: self.id.clone(),
            id_key: self.id_key.to_hex().to_string(),
            chunker: self.params.chunker,
            block_size: self.params.block_size,
            pack_size: self.params.pack_size,
            created: self.created.clone(),
        };
        serde_json::to_vec_pretty(&json).expect("config serializes")
    }

    pub(crate) fn from_json(bytes: &[u8]) -> Result<Self> {
        let json: ConfigJson =
            serde_json::from_slice(bytes).map_err(|e| RepoError::corrupt("config", e))?;
        if json.version != VERSION {
            return Err(RepoError::Version(json.version));
        }
        Ok(Self {
            id: json.id,
            params: Params {
                chunker: json.chunker,
                block_size: json.block_size,
                pack_size: json.pack_size,
            },
            created: json.created,
            id_key: IdKey::from_hex(&zeroize::Zeroizing::new(json.id_key))?,
        })
    }
}

pub(crate) fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

//! The `config` object (FORMAT.md section 4).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{RepoError, Result};
use crate::id::{Id, IdKey};

/// `version` this program writes and reads.
pub const VERSION: u32 = 1;

/// The grace period of a repository whose config names none (FORMAT.md section 9).
pub const DEFAULT_GRACE: Duration = Duration::from_hours(24);
/// The session timeout of a repository whose config names none (FORMAT.md section 9.2).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_mins(30);
/// The shortest session timeout: a session is refreshed five times per timeout, and
/// storage times have one-second steps.
const MIN_SESSION_TIMEOUT: Duration = Duration::from_secs(2);

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
    /// The shortest time a prune mark waits before its packs may be deleted; `kura prune
    /// --grace` may lengthen it, never shorten it.
    pub grace: Duration,
    /// How long a backup's session stays live without a refresh (storage time).
    pub session_timeout: Duration,
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
            grace: DEFAULT_GRACE,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
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
    /// Absent in configs written before sessions: [`DEFAULT_GRACE`].
    #[serde(default = "default_grace_secs")]
    grace_secs: u64,
    /// Absent in configs written before sessions: [`DEFAULT_SESSION_TIMEOUT`].
    #[serde(default = "default_session_timeout_secs")]
    session_timeout_secs: u64,
}

fn default_grace_secs() -> u64 {
    DEFAULT_GRACE.as_secs()
}

fn default_session_timeout_secs() -> u64 {
    DEFAULT_SESSION_TIMEOUT.as_secs()
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
        if params.session_timeout < MIN_SESSION_TIMEOUT {
            return Err(RepoError::Invalid(format!(
                "a session timeout of {:?} is below the minimum of {MIN_SESSION_TIMEOUT:?}",
                params.session_timeout
            )));
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
            grace_secs: self.params.grace.as_secs(),
            session_timeout_secs: self.params.session_timeout.as_secs(),
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
                grace: Duration::from_secs(json.grace_secs),
                session_timeout: Duration::from_secs(json.session_timeout_secs)
                    .max(MIN_SESSION_TIMEOUT),
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

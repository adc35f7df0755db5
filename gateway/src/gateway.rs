//! The gateway's state: the upstream, the keys, a cache of verified object headers (what
//! it holds, [`Located`]; `object.rs` fills it), and one of listed objects found not to be
//! kura's (`s3/list.rs` fills it).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use kura_keys::{Cipher, Keyring, Layout, PayloadKey};
use s3s::dto::Timestamp;

use crate::credentials::Credentials;
use crate::metrics::Metrics;
use crate::upstream::Upstream;

/// An object whose header verified, with the keys and layout to read any byte of it.
pub(crate) struct Located {
    pub(crate) key: Arc<PayloadKey>,
    /// The object's `COMMITMENT` (SPEC 3), which its metadata's header copy must share.
    pub(crate) commitment: [u8; kura_keys::format::KEY_SIZE],
    pub(crate) layout: Layout,
    pub(crate) upstream_etag: Option<String>,
    pub(crate) last_modified: Option<Timestamp>,
}

impl Located {
    /// The plaintext size.
    pub(crate) fn size(&self) -> u64 {
        self.layout.size()
    }
}

/// Cache key of a located object: bucket, key, version.
pub(crate) type ObjectKey = (String, String, Option<String>);

/// Cache key of a stored object's bytes: bucket, key, version, and their identity (the
/// upstream ETag, or size and modification time where a store lists no ETag), which
/// changes when the bytes do, so that an entry does not outlive what it describes.
pub(crate) type StoredKey = (String, String, Option<String>, String);

/// The encrypting S3 front: implements s3s's `S3` by calling the upstream's.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) upstream: Upstream,
    /// The keys in use; `reload.rs` replaces them when the key file changes.
    keyring: Arc<ArcSwap<Keyring>>,
    pub(crate) cipher: Cipher,
    pub(crate) credentials: Credentials,
    pub(crate) metrics: Metrics,
    /// Verified headers and layouts by object, checked against the upstream ETag on use;
    /// saves the header read on repeated range GETs (aws-cli, Kopia, restic).
    pub(crate) located: moka::future::Cache<ObjectKey, Arc<Located>>,
    /// Listed objects whose header and trailer were read and are not kura's: listings
    /// report their stored size without reading them again, so that objects planted in
    /// the bucket cost their reads once, not on every page that lists them.
    pub(crate) unreadable: moka::future::Cache<StoredKey, crate::object::Unopened>,
}

impl Gateway {
    /// A gateway over `upstream` with `keyring`, writing new objects with `cipher`.
    #[must_use]
    pub(crate) fn new(
        upstream: Upstream,
        keyring: Arc<ArcSwap<Keyring>>,
        cipher: Cipher,
        credentials: Credentials,
        metrics: Metrics,
    ) -> Self {
        // Every upstream call goes through the counting layer, which also normalises
        // deferred completions.
        let upstream = upstream.counted(metrics.clone());
        let located = moka::future::Cache::builder()
            // Weighed by layout size: a layout table can list 10,000 parts.
            .weigher(|_, v: &Arc<Located>| {
                1 + u32::try_from(v.layout.table_parts().map_or(0, |p| p.len() / 64))
                    .unwrap_or(u32::MAX)
            })
            .max_capacity(100_000)
            .time_to_idle(Duration::from_mins(10))
            .build();
        let unreadable = moka::future::Cache::builder()
            .max_capacity(100_000)
            .time_to_idle(Duration::from_mins(10))
            .build();
        Self {
            upstream,
            keyring,
            cipher,
            credentials,
            metrics,
            located,
            unreadable,
        }
    }

    /// The keys in use now. A request takes them once per use; a reload between two uses
    /// only adds keys (a rotation keeps the old ones), so both uses open the same objects.
    pub(crate) fn keys(&self) -> Arc<Keyring> {
        self.keyring.load_full()
    }
}

//! Per-object mutexes for the embedded store. An object there is three files (the body and
//! s3s-fs's two sidecars: attributes and ETag), replaced one rename at a time, so two
//! writers of one key could leave one's body beside the other's sidecars: the gateway then
//! refuses the object as belonging to another (seen with three backups storing the same
//! content-addressed pack at once). Writers, deleters and the read of a body with its
//! sidecars hold the key's mutex; keys share a fixed set of stripes, so memory does not
//! grow with the number of keys.

use std::hash::BuildHasher as _;
use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard, OwnedMutexGuard};

/// Stripes: enough that unrelated keys rarely wait on each other.
const STRIPES: usize = 256;

/// One mutex per stripe of keys; an object's mutex is its stripe's.
pub(super) struct KeyMutexes {
    stripes: Box<[Arc<Mutex<()>>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl KeyMutexes {
    pub(super) fn new() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| Arc::new(Mutex::new(()))).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    fn stripe(&self, bucket: &str, key: &str) -> usize {
        usize::try_from(self.hasher.hash_one((bucket, key)) % STRIPES as u64).unwrap_or(0)
    }

    /// The mutex of one object, locked.
    pub(super) async fn lock(&self, bucket: &str, key: &str) -> MutexGuard<'_, ()> {
        self.stripes[self.stripe(bucket, key)].lock().await
    }

    /// The mutex of one object, locked and held by a task of its own (one that must not be cancelled
    /// half-way by a client that goes away).
    pub(super) async fn lock_owned(&self, bucket: &str, key: &str) -> OwnedMutexGuard<()> {
        self.stripes[self.stripe(bucket, key)]
            .clone()
            .lock_owned()
            .await
    }

    /// The mutexes of several objects of one bucket, locked in stripe order (so two callers
    /// never wait on each other in a cycle).
    pub(super) async fn lock_all<'k>(
        &self,
        bucket: &str,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Vec<MutexGuard<'_, ()>> {
        self.lock_objects(keys.into_iter().map(|k| (bucket, k)))
            .await
    }

    /// The mutexes of several objects, each named by (bucket, key), in stripe order.
    pub(super) async fn lock_objects<'k>(
        &self,
        objects: impl IntoIterator<Item = (&'k str, &'k str)>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = objects
            .into_iter()
            .map(|(b, k)| self.stripe(b, k))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for s in stripes {
            guards.push(self.stripes[s].lock().await);
        }
        guards
    }
}

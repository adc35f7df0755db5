//! The upkeep lease: one prune or forget at a time, a stale lease taken over, and a paused
//! holder whose lease was taken over stops before it marks or deletes anything.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kura_repo::{FileType, RepoError, Repository, Source, Storage, backup, check, forget, prune};
use tokio::sync::Notify;

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, Hooked, pseudo_random};
use crate::sessions::Gate;
use crate::upkeep::keep_last_of_host;

/// Fault-injecting wrapper: the first listing of packs (a prune has its lease and has read
/// snapshots and index by then) waits until the test releases it, as a process paused
/// (SIGSTOP, a VM pause) in the middle of a prune would.
struct PausedAtPackListing<S> {
    inner: S,
    reached: Arc<Notify>,
    resume: Arc<Notify>,
    paused: std::sync::atomic::AtomicBool,
}

impl<S> PausedAtPackListing<S> {
    fn new(inner: S) -> (Self, Arc<Notify>, Arc<Notify>) {
        let (reached, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let me = Self {
            inner,
            reached: reached.clone(),
            resume: resume.clone(),
            paused: false.into(),
        };
        (me, reached, resume)
    }
}

impl<S: Storage> Storage for PausedAtPackListing<S> {
    async fn put(&self, ft: FileType, name: &str, data: Bytes) -> kura_repo::Result<()> {
        self.inner.put(ft, name, data).await
    }
    async fn create(&self, ft: FileType, name: &str, data: Bytes) -> kura_repo::Result<bool> {
        self.inner.create(ft, name, data).await
    }
    async fn get(&self, ft: FileType, name: &str) -> kura_repo::Result<Bytes> {
        self.inner.get(ft, name).await
    }
    async fn get_range(
        &self,
        ft: FileType,
        name: &str,
        offset: u64,
        len: u64,
    ) -> kura_repo::Result<Bytes> {
        self.inner.get_range(ft, name, offset, len).await
    }
    async fn exists(&self, ft: FileType, name: &str) -> kura_repo::Result<bool> {
        self.inner.exists(ft, name).await
    }
    async fn list(&self, ft: FileType) -> kura_repo::Result<Vec<(String, u64)>> {
        if ft == FileType::Pack && !self.paused.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.reached.notify_one();
            self.resume.notified().await;
        }
        self.inner.list(ft).await
    }
    async fn delete(&self, ft: FileType, name: &str) -> kura_repo::Result<()> {
        self.inner.delete(ft, name).await
    }
    async fn modified(&self, ft: FileType, name: &str) -> kura_repo::Result<Option<i64>> {
        self.inner.modified(ft, name).await
    }
}

/// A repository at `prefix` with two snapshots, the older one forgotten: a prune has
/// packs to mark.
async fn repository_with_garbage(env: &Env, prefix: &str) {
    let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(old.path().join("old.bin"), pseudo_random(2 << 20, 31)).unwrap();
    std::fs::write(new.path().join("new.bin"), pseudo_random(2 << 20, 32)).unwrap();
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    for dir in [&old, &new] {
        backup(&mut repo, Source::Paths(vec![dir.path().into()]), opts())
            .await
            .unwrap();
    }
    forget(&repo, &keep_last_of_host(1)).await.unwrap();
}

fn leases(env: &Env, prefix: &str) -> Vec<String> {
    env.stored_files()
        .into_iter()
        .filter_map(|p| {
            let s = p.to_string_lossy().into_owned();
            s.contains(&format!("/{prefix}/lease/"))
                .then(|| s.rsplit('/').next().unwrap().to_string())
        })
        .collect()
}

/// Makes the one lease of the repository at `prefix` stale, as its holder's pause past
/// the lifetime would (the lifetime shortened to one second, rather than waiting five
/// minutes); returns its name.
pub(crate) async fn lease_made_stale(env: &Env, prefix: &str) -> String {
    let held = leases(env, prefix);
    assert_eq!(held.len(), 1, "{held:?}");
    let short = br#"{"holder":"paused","command":"prune","ttl_secs":1,"token":"00"}"#;
    env.storage(prefix)
        .put(FileType::Lease, &held[0], Bytes::from_static(short))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    held[0].clone()
}

/// Asserts that the repository at `prefix` holds one lease, released: a run that ends
/// leaves its generation, so that the next run takes a higher one.
async fn assert_only_a_released_lease(env: &Env, prefix: &str) {
    let held = leases(env, prefix);
    assert_eq!(held.len(), 1, "{held:?}");
    let bytes = env
        .storage(prefix)
        .get(FileType::Lease, &held[0])
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["released"], true, "{json}");
    assert_eq!(
        json["ttl_secs"], 0,
        "stale to a reader that knows no release: {json}"
    );
}

/// Before: the second prune ran beside the first (nothing stopped it), so both could
/// rewrite the same index objects.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_prune_while_one_runs_fails_naming_the_holder() {
    let env = Env::start().await;
    repository_with_garbage(&env, "two").await;
    let (paused, reached, resume) = PausedAtPackListing::new(env.storage("two"));
    let mut first = Repository::open(paused).await.unwrap();
    let first = tokio::spawn(async move { prune(&mut first, Duration::ZERO).await });
    reached.notified().await;

    let mut second = Repository::open(env.storage("two")).await.unwrap();
    let refused = prune(&mut second, Duration::ZERO).await;
    let err = refused.expect_err("a second prune must not run beside the first");
    assert!(
        matches!(&err, RepoError::Busy { command, .. } if command == "prune"),
        "{err}"
    );
    assert!(
        err.to_string().contains("process"),
        "names the holder: {err}"
    );
    let refused = forget(&second, &keep_last_of_host(1)).await;
    assert!(
        matches!(refused, Err(RepoError::Busy { .. })),
        "{refused:?}"
    );

    resume.notify_one();
    let report = first.await.unwrap().unwrap();
    assert!(report.marked > 0, "{report:?}");
    assert_only_a_released_lease(&env, "two").await;
    prune(&mut second, Duration::ZERO).await.unwrap();
    assert!(check(&mut second, true).await.unwrap().is_clean());
}

/// A lease whose holder stopped refreshing it is stale once its lifetime has passed in
/// the storage's clock; the next prune takes over and deletes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_lease_is_taken_over_and_a_live_one_is_not() {
    let env = Env::start().await;
    repository_with_garbage(&env, "stale").await;
    let storage = env.storage("stale");
    let lease = |ttl: u64| {
        Bytes::from(format!(
            r#"{{"holder":"gone-host, process 1","command":"prune","ttl_secs":{ttl},"token":"00"}}"#
        ))
    };
    storage
        .put(FileType::Lease, "7", lease(3600))
        .await
        .unwrap();
    let mut repo = Repository::open(env.storage("stale")).await.unwrap();
    let err = prune(&mut repo, Duration::ZERO).await.unwrap_err();
    assert!(err.to_string().contains("gone-host, process 1"), "{err}");

    storage.put(FileType::Lease, "7", lease(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    prune(&mut repo, Duration::ZERO).await.unwrap();
    assert_eq!(leases(&env, "stale"), ["8"], "the stale one deleted");
    assert_only_a_released_lease(&env, "stale").await;
}

/// A prune paused past its lease's lifetime finds, when it resumes, that another run took
/// the lease over: it stops before marking or deleting anything.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_prune_whose_lease_was_taken_over_marks_nothing() {
    let env = Env::start().await;
    repository_with_garbage(&env, "lost").await;
    let (paused, reached, resume) = PausedAtPackListing::new(env.storage("lost"));
    let mut first = Repository::open(paused).await.unwrap();
    let first = tokio::spawn(async move { prune(&mut first, Duration::ZERO).await });
    reached.notified().await;

    // What a run that found the lease stale does: a newer generation, the old one deleted.
    let storage = env.storage("lost");
    let held = leases(&env, "lost");
    assert_eq!(held.len(), 1, "{held:?}");
    let newer = held[0].parse::<u64>().unwrap() + 1;
    storage
        .put(
            FileType::Lease,
            &newer.to_string(),
            Bytes::from_static(br#"{"holder":"h","command":"prune","ttl_secs":300,"token":"1"}"#),
        )
        .await
        .unwrap();
    storage.delete(FileType::Lease, &held[0]).await.unwrap();

    resume.notify_one();
    let outcome = first.await.unwrap();
    assert!(matches!(outcome, Err(RepoError::LeaseLost)), "{outcome:?}");
    assert!(
        storage.list(FileType::PruneMark).await.unwrap().is_empty(),
        "no mark written after the lease was lost"
    );
}

/// Before: a run that took the lease over released it by deleting it, which left no lease
/// at all. The paused holder's refresher, once it resumed, wrote its `lease/N` again, and
/// its next check found no higher generation: it went on marking and deleting from what it
/// had read before the pause, beside whatever the other run had changed: here it marked
/// the packs of a backup made meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_prune_stops_even_after_the_run_that_took_over_released_the_lease() {
    let env = Env::start().await;
    repository_with_garbage(&env, "released").await;
    let (paused, reached, resume) = PausedAtPackListing::new(env.storage("released"));
    let mut first = Repository::open(paused).await.unwrap();
    let first = tokio::spawn(async move { prune(&mut first, Duration::ZERO).await });
    reached.notified().await;

    // The paused run's lease goes stale (its lifetime shortened to one second, rather than
    // waiting five minutes), and a second prune takes over, runs and ends.
    let storage = env.storage("released");
    let held = lease_made_stale(&env, "released").await;
    let mut second = Repository::open(env.storage("released")).await.unwrap();
    let report = prune(&mut second, Duration::ZERO).await.unwrap();
    assert!(report.marked > 0, "{report:?}");
    // The paused run's refresher, first thing after it resumes, writes its lease again.
    let live = br#"{"holder":"paused","command":"prune","ttl_secs":300,"token":"00"}"#;
    storage
        .put(FileType::Lease, &held, Bytes::from_static(live))
        .await
        .unwrap();
    // A backup the paused run never saw: it lists the new packs once it resumes, unused
    // by every snapshot it read before the pause.
    let newer = tempfile::tempdir().unwrap();
    std::fs::write(newer.path().join("newer.bin"), pseudo_random(1 << 20, 33)).unwrap();
    backup(
        &mut second,
        Source::Paths(vec![newer.path().into()]),
        opts(),
    )
    .await
    .unwrap();

    resume.notify_one();
    let outcome = first.await.unwrap();
    assert!(matches!(outcome, Err(RepoError::LeaseLost)), "{outcome:?}");
    assert_eq!(
        storage.list(FileType::PruneMark).await.unwrap().len(),
        1,
        "only the second run's mark"
    );
    assert!(check(&mut second, true).await.unwrap().is_clean());
}

/// Before: `repair index` paused past its lease's lifetime, just before it wrote its new
/// index objects. Two prunes took the lease in turn and deleted the unused packs; the
/// repair then wrote objects naming them, found its lease lost, and stopped, leaving those
/// objects behind for later backups to trust.
#[tokio::test(flavor = "multi_thread")]
async fn a_repair_of_the_index_that_lost_its_lease_leaves_no_object_naming_deleted_packs() {
    let env = Env::start().await;
    repository_with_garbage(&env, "reindex").await;
    let gate = Gate::new(vec![FileType::Index], None);
    let storage = Hooked {
        inner: env.storage("reindex"),
        hook: gate.clone(),
    };
    let mut repairer = Repository::open(storage).await.unwrap();
    let running = tokio::spawn(async move { kura_repo::repair_index(&mut repairer, false).await });
    gate.reached.notified().await;

    // Its lease goes stale (its lifetime shortened to one second); two prunes run.
    lease_made_stale(&env, "reindex").await;
    let mut pruner = Repository::open(env.storage("reindex")).await.unwrap();
    assert!(prune(&mut pruner, Duration::ZERO).await.unwrap().marked > 0);
    assert!(prune(&mut pruner, Duration::ZERO).await.unwrap().deleted > 0);

    gate.open.send_replace(true);
    let outcome = running.await.unwrap();
    assert!(matches!(outcome, Err(RepoError::LeaseLost)), "{outcome:?}");
    let mut reader = Repository::open(env.storage("reindex")).await.unwrap();
    let report = check(&mut reader, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

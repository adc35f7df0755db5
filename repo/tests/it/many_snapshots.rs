//! Costs that must not grow with the snapshots a repository holds: every backup reads the
//! index objects of all of them and finds its parent among them, and a far gateway (B2,
//! S3) answers each read in tens of milliseconds.

use std::sync::atomic::Ordering::SeqCst;

use kura_repo::{FileType, Repository, Source, backup};

use crate::backup_restore::{opts, small_params};
use crate::harness::{DELAY, Env, Hook, Hooked, InFlight, Op};

/// Fault-injecting hook: each read of a snapshot or index object takes `DELAY`, as a far
/// store's would; counts how many of each are in flight at once.
#[derive(Default)]
struct SlowReads {
    snapshots: InFlight,
    index: InFlight,
}

impl Hook for std::sync::Arc<SlowReads> {
    async fn before(&self, op: Op, ft: FileType, _: &str) -> kura_repo::Result<()> {
        match (op, ft) {
            (Op::Get, FileType::Snapshot) => self.snapshots.wait().await,
            (Op::Get, FileType::Index) => self.index.wait().await,
            _ => {}
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_snapshots_and_index_objects_of_a_repository_are_read_many_at_once() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let mut repo = Repository::init(env.storage("many"), small_params())
        .await
        .unwrap();
    let n = 24;
    for i in 0..n {
        // New content each time: an index object each.
        std::fs::write(src.path().join("f"), format!("version {i}")).unwrap();
        backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
            .await
            .unwrap();
    }

    let hook = std::sync::Arc::new(SlowReads::default());
    let slow = Hooked {
        inner: env.storage("many"),
        hook: hook.clone(),
    };
    let started = std::time::Instant::now();
    let repo = Repository::open(slow).await.unwrap();
    let took = started.elapsed();
    let most = hook.index.most.load(SeqCst);
    assert!(most >= 8, "at most {most} index reads in flight at once");
    assert!(
        took < DELAY * 8,
        "opening with {n} index objects took {took:?}"
    );
    let started = std::time::Instant::now();
    let snaps = repo.snapshots().await.unwrap();
    let took = started.elapsed();
    assert_eq!(snaps.len(), n);
    assert!(
        snaps
            .windows(2)
            .all(|w| w[0].1.instant() <= w[1].1.instant()),
        "oldest first"
    );
    let most = hook.snapshots.most.load(SeqCst);
    assert!(most >= 8, "at most {most} snapshot reads in flight at once");
    assert!(took < DELAY * 8, "{n} snapshots took {took:?}");
}

//! Backup sessions and the storage's clock (FORMAT.md sections 9.2, 9.3): a backup held
//! before its snapshot loses nothing to prunes, one whose session lapsed keeps no
//! snapshot, no pack is written under a marked name, and the grace period has a floor.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use kura_repo::{
    FileType, Include, RepoError, Repository, Source, Storage as _, backup, check, prune, restore,
};
use tokio::sync::{Notify, watch};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, Hook, Hooked, Op, pseudo_random};

/// Holds every PUT of the `hold` kinds (once armed) until the test opens the gate, as a
/// process paused there (SIGSTOP, a VM pause, a laptop asleep) would.
pub(crate) struct Gate {
    hold: Vec<FileType>,
    /// A PUT of this kind arms the gate; armed from the start when `None`.
    armed_on: Option<FileType>,
    armed: AtomicBool,
    pub(crate) reached: Notify,
    pub(crate) open: watch::Sender<bool>,
}

impl Gate {
    pub(crate) fn new(hold: Vec<FileType>, armed_on: Option<FileType>) -> Arc<Self> {
        Arc::new(Self {
            hold,
            armed_on,
            armed: AtomicBool::new(armed_on.is_none()),
            reached: Notify::new(),
            open: watch::channel(false).0,
        })
    }
}

impl Hook for Arc<Gate> {
    async fn before(&self, op: Op, ft: FileType, _name: &str) -> kura_repo::Result<()> {
        if op != Op::Put {
            return Ok(());
        }
        if Some(ft) == self.armed_on {
            self.armed.store(true, SeqCst);
        }
        if self.armed.load(SeqCst) && self.hold.contains(&ft) && !*self.open.borrow() {
            self.reached.notify_one();
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|o| *o).await;
        }
        Ok(())
    }
}

/// A repository at `prefix` whose only snapshot, of `src` (one file), was forgotten: its
/// packs are unused, and a backup of `src` again relies on them.
async fn forgotten_backup_of(env: &Env, prefix: &str, src: &std::path::Path, p: kura_repo::Params) {
    std::fs::write(src.join("kept.bin"), pseudo_random(2 << 20, 41)).unwrap();
    let mut repo = Repository::init(env.storage(prefix), p).await.unwrap();
    let (first, _) = backup(&mut repo, Source::Paths(vec![src.into()]), opts())
        .await
        .unwrap();
    repo.storage()
        .delete(FileType::Snapshot, &first.to_hex())
        .await
        .unwrap();
}

/// Starts a backup of `src` to the repository at `prefix` through `gate`, and returns
/// once the gate holds it.
async fn backup_held_by(
    env: &Env,
    prefix: &str,
    gate: &Arc<Gate>,
    src: &std::path::Path,
) -> tokio::task::JoinHandle<kura_repo::Result<(kura_repo::Id, kura_repo::Snapshot)>> {
    let storage = Hooked {
        inner: env.storage(prefix),
        hook: gate.clone(),
    };
    let mut writer = Repository::open(storage).await.unwrap();
    let path = src.to_path_buf();
    let running =
        tokio::spawn(async move { backup(&mut writer, Source::Paths(vec![path]), opts()).await });
    gate.reached.notified().await;
    running
}

/// Before sessions: the second prune deleted the packs the held backup relied on, and
/// `check --read-data` found its snapshot's file missing.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_held_before_its_snapshot_loses_nothing_to_two_prunes() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    forgotten_backup_of(&env, "held", src.path(), small_params()).await;

    let gate = Gate::new(vec![FileType::Snapshot], None);
    let running = backup_held_by(&env, "held", &gate, src.path()).await;

    // The shortest grace the repository allows (none): only the session protects.
    let mut pruner = Repository::open(env.storage("held")).await.unwrap();
    let first = prune(&mut pruner, Duration::ZERO).await.unwrap();
    assert!(first.marked > 0, "{first:?}");
    let second = prune(&mut pruner, Duration::ZERO).await.unwrap();
    assert_eq!(second.deleted, 0, "{second:?}");
    assert_eq!(second.waiting, first.marked, "{second:?}");

    gate.open.send_replace(true);
    let (_, snap) = running.await.unwrap().unwrap();
    let mut reader = Repository::open(env.storage("held")).await.unwrap();
    assert_whole(&mut reader, &snap, src.path()).await;
    assert!(
        env.objects_under("held", "session").is_empty(),
        "a finished backup closes its session"
    );
    // Its snapshot uses the marked packs again: the next prune unmarks them.
    let third = prune(&mut pruner, Duration::ZERO).await.unwrap();
    assert_eq!(
        (third.deleted, third.rescued),
        (0, first.marked),
        "{third:?}"
    );
}

/// Before the lapse check: the backup wrote its snapshot after a prune had deleted the
/// packs it relied on, and `check --read-data` found the file missing.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_whose_session_lapsed_keeps_no_snapshot_and_loses_nothing() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let mut params = small_params();
    params.session_timeout = Duration::from_secs(2);
    forgotten_backup_of(&env, "lapsed", src.path(), params).await;
    std::fs::write(src.path().join("new.bin"), pseudo_random(1 << 20, 42)).unwrap();

    // From its index write on (its packs are stored), the backup is paused: neither its
    // session refreshes nor its snapshot reach the storage.
    let gate = Gate::new(
        vec![FileType::Snapshot, FileType::Session],
        Some(FileType::Index),
    );
    let running = backup_held_by(&env, "lapsed", &gate, src.path()).await;
    // Past the session timeout, in the storage's time too (one-second steps).
    tokio::time::sleep(Duration::from_secs(4)).await;

    let mut pruner = Repository::open(env.storage("lapsed")).await.unwrap();
    let first = prune(&mut pruner, Duration::ZERO).await.unwrap();
    assert_eq!(first.stale_sessions, 1, "{first:?}");
    let second = prune(&mut pruner, Duration::ZERO).await.unwrap();
    assert!(
        second.deleted > 0,
        "the stale session protects nothing: {second:?}"
    );

    gate.open.send_replace(true);
    let err = running.await.unwrap().unwrap_err();
    assert!(matches!(err, RepoError::SessionLapsed { .. }), "{err}");
    assert!(err.to_string().contains("Run the backup again"), "{err}");
    assert!(
        env.objects_under("lapsed", "snapshots").is_empty(),
        "no snapshot kept"
    );
    let mut reader = Repository::open(env.storage("lapsed")).await.unwrap();
    let report = check(&mut reader, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

/// Before: a backup paused after it stored its packs and before it indexed them lost them
/// to two prunes (unindexed, so unused), then wrote its index object anyway and failed
/// only at its snapshot. That index object stayed, listing the deleted packs, and the
/// next backup of the same files took their blobs as stored: its snapshot named packs
/// that were gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_paused_before_its_index_write_leaves_no_index_of_deleted_packs() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("kept.bin"), pseudo_random(2 << 20, 43)).unwrap();
    let mut params = small_params();
    params.session_timeout = Duration::from_secs(2);
    Repository::init(env.storage("unindexed"), params)
        .await
        .unwrap();

    // Paused from its first pack on: its packs reach the storage, its index object and its
    // session refreshes wait.
    let gate = Gate::new(
        vec![FileType::Index, FileType::Session],
        Some(FileType::Pack),
    );
    let running = backup_held_by(&env, "unindexed", &gate, src.path()).await;
    tokio::time::sleep(Duration::from_secs(4)).await;

    let mut pruner = Repository::open(env.storage("unindexed")).await.unwrap();
    let first = prune(&mut pruner, Duration::ZERO).await.unwrap();
    assert_eq!(first.stale_sessions, 1, "{first:?}");
    assert!(first.marked > 0, "its packs are in no index: {first:?}");
    let second = prune(&mut pruner, Duration::ZERO).await.unwrap();
    assert_eq!(second.deleted, first.marked, "{second:?}");

    gate.open.send_replace(true);
    let err = running.await.unwrap().unwrap_err();
    assert!(matches!(err, RepoError::SessionLapsed { .. }), "{err}");
    assert!(
        env.objects_under("unindexed", "index").is_empty(),
        "no index object names the deleted packs"
    );

    // Run again, as the error says: the new snapshot is whole.
    let mut writer = Repository::open(env.storage("unindexed")).await.unwrap();
    let (_, snap) = backup(&mut writer, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert_whole(&mut writer, &snap, src.path()).await;
}

/// Before: a backup of content whose packs a prune had marked rebuilt them byte for byte,
/// under the marked names, which a prune's delete could then take.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_never_writes_a_pack_under_a_name_a_prune_marked() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    forgotten_backup_of(&env, "unmarked", src.path(), small_params()).await;
    let mut repo = Repository::open(env.storage("unmarked")).await.unwrap();
    let marked = prune(&mut repo, Duration::ZERO).await.unwrap().marked;
    assert!(marked > 0);
    let before: Vec<(std::path::PathBuf, Vec<u8>)> = env
        .objects_under("unmarked", "data")
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect();
    assert_eq!(before.len(), marked, "every pack is marked");

    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    for (file, bytes) in &before {
        assert!(
            std::fs::read(file).unwrap() == *bytes,
            "{} was written again",
            file.display()
        );
    }
    assert_eq!(env.objects_under("unmarked", "data").len(), 2 * marked);

    // The marked packs go; the backup's own stay whole.
    let report = prune(&mut repo, Duration::ZERO).await.unwrap();
    assert_eq!(report.deleted, marked, "{report:?}");
    assert_whole(&mut repo, &snap, src.path()).await;
}

/// `check --read-data` is clean, and `snap` restores `src`'s `kept.bin` byte for byte.
async fn assert_whole<S: kura_repo::Storage>(
    repo: &mut Repository<S>,
    snap: &kura_repo::Snapshot,
    src: &std::path::Path,
) {
    let report = check(repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    let out = tempfile::tempdir().unwrap();
    restore(repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let name = src.file_name().unwrap();
    assert_eq!(
        std::fs::read(src.join("kept.bin")).unwrap(),
        std::fs::read(out.path().join(name).join("kept.bin")).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prune_refuses_a_grace_period_shorter_than_the_repositorys() {
    let env = Env::start().await;
    let mut params = small_params();
    params.grace = Duration::from_hours(24);
    let mut repo = Repository::init(env.storage("floor"), params)
        .await
        .unwrap();
    let err = prune(&mut repo, Duration::from_hours(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            RepoError::GraceTooShort {
                asked_secs: 3600,
                min_secs: 86_400
            }
        ),
        "{err}"
    );
    prune(&mut repo, Duration::from_hours(48)).await.unwrap();
    // The floor is stored in the repository, not in this handle.
    let mut reopened = Repository::open(env.storage("floor")).await.unwrap();
    assert!(prune(&mut reopened, Duration::ZERO).await.is_err());
}

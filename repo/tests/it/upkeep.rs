//! Incremental backups, forget and prune, concurrent writers, and check.

use std::time::Duration;

use kura_repo::{
    FileType, Include, KeepPolicy, Repository, Source, Storage as _, backup, check, forget, prune,
    restore,
};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, pseudo_random, settle};

/// Keep the newest `n` snapshots of each host, whatever their paths (these tests back up
/// a different path each time and forget the older ones).
pub(crate) fn keep_last_of_host(n: u32) -> kura_repo::ForgetOptions {
    kura_repo::ForgetOptions {
        policy: KeepPolicy {
            last: n,
            ..KeepPolicy::default()
        },
        group_by: "host".parse().unwrap(),
        ..kura_repo::ForgetOptions::default()
    }
}

pub(crate) fn pack_count(env: &Env, prefix: &str) -> usize {
    env.objects_under(prefix, "data").len()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_incremental_backup_reads_only_what_changed() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    for (i, name) in ["a.bin", "b.bin", "c.bin"].iter().enumerate() {
        std::fs::write(src.path().join(name), pseudo_random(500_000, i as u64)).unwrap();
    }
    // Files written just before a backup starts are read again by the next one.
    settle();
    let mut repo = Repository::init(env.storage("inc"), small_params())
        .await
        .unwrap();
    let (first, _) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    std::fs::write(src.path().join("b.bin"), pseudo_random(300_000, 99)).unwrap();
    let mut o = opts();
    o.parent = Some(first);
    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.path().into()]), o)
        .await
        .unwrap();
    assert_eq!(snap.summary.files, 3);
    assert_eq!(snap.summary.files_unchanged, 2);
    assert_eq!(
        snap.summary.bytes_read, 300_000,
        "only the changed file was read"
    );

    let out = tempfile::tempdir().unwrap();
    restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let name = src.path().file_name().unwrap();
    for f in ["a.bin", "b.bin", "c.bin"] {
        assert_eq!(
            std::fs::read(src.path().join(f)).unwrap(),
            std::fs::read(out.path().join(name).join(f)).unwrap()
        );
    }
}

/// The parent's subtrees are read ahead of the walk (issue 27): directories with one
/// subtree ID (empty ones), directories gone since and new ones all come out right, and
/// the unchanged files are still taken from the parent unread.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_run_reads_the_parents_trees_ahead_and_keeps_every_directory_right() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let root = src.path().join("data");
    for d in 0..30 {
        let dir = root.join(format!("d{d:02}/inner"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), pseudo_random(1000, d)).unwrap();
        std::fs::create_dir_all(root.join(format!("e{d:02}"))).unwrap();
    }
    settle();
    let mut repo = Repository::init(env.storage("ahead"), small_params())
        .await
        .unwrap();
    let (first, _) = backup(&mut repo, Source::Paths(vec![root.clone()]), opts())
        .await
        .unwrap();
    std::fs::remove_dir_all(root.join("d10")).unwrap();
    std::fs::remove_dir_all(root.join("e03")).unwrap();
    std::fs::create_dir_all(root.join("d05b/inner")).unwrap();
    std::fs::write(root.join("d05b/inner/f"), b"new").unwrap();
    let mut o = opts();
    o.parent = Some(first);
    let (_, snap) = backup(&mut repo, Source::Paths(vec![root.clone()]), o)
        .await
        .unwrap();
    assert_eq!(snap.summary.files, 30);
    assert_eq!(snap.summary.files_unchanged, 29, "all but the new one");
    assert_eq!(snap.summary.dirs, 1 + 29 * 2 + 29 + 2);
    let out = tempfile::tempdir().unwrap();
    restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let listed = |dir: &std::path::Path| {
        let mut v: Vec<_> = kura_testkit::walk::files_under(dir)
            .into_iter()
            .map(|p| p.strip_prefix(dir).unwrap().to_path_buf())
            .collect();
        v.sort();
        v
    };
    assert_eq!(listed(&out.path().join("data")), listed(&root));
    let empty = (0..30)
        .filter(|d| out.path().join(format!("data/e{d:02}")).is_dir())
        .count();
    assert_eq!(empty, 29, "every empty directory but the one removed");
    assert_eq!(
        std::fs::read(out.path().join("data/d05b/inner/f")).unwrap(),
        b"new"
    );
    assert_eq!(
        std::fs::read(out.path().join("data/d29/inner/f")).unwrap(),
        pseudo_random(1000, 29)
    );
}

/// The parent's trees of a directory's subdirectories lie next to each other in a pack
/// and come in runs, one range GET each (issue 27): a re-run of 150 directories made 152
/// range GETs when each tree came alone (each a request the gateway and the store
/// answer), 7 with runs of up to 32.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_run_reads_the_parents_trees_of_many_directories_in_a_few_range_gets() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let root = src.path().join("data");
    crate::harness::dirs_of_one_file(&root, 150);
    settle();
    let mut repo = Repository::init(env.storage("runs"), small_params())
        .await
        .unwrap();
    let (first, _) = backup(&mut repo, Source::Paths(vec![root.clone()]), opts())
        .await
        .unwrap();
    let hook = std::sync::Arc::new(crate::harness::RangeGets::default());
    let mut counted = Repository::open(crate::harness::Hooked {
        inner: env.storage("runs"),
        hook: hook.clone(),
    })
    .await
    .unwrap();
    let mut o = opts();
    o.parent = Some(first);
    let (_, snap) = backup(&mut counted, Source::Paths(vec![root.clone()]), o)
        .await
        .unwrap();
    assert_eq!(snap.summary.files_unchanged, 150);
    assert_eq!(snap.summary.dirs, 151);
    let gets = hook.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        gets <= 8,
        "{gets} range GETs for the trees of 150 directories and their parent"
    );
}

/// Regression: a backup on a repository opened before a prune deleted a pack (and its
/// mark) must not take the blobs of that pack from the index it was opened with.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_opened_before_a_prune_deleted_a_pack_stores_its_blobs_again() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(3 << 20, 7)).unwrap();
    std::fs::write(src.path().join("b.bin"), pseudo_random(3 << 20, 8)).unwrap();
    let source = |name: &str| Source::Paths(vec![src.path().join(name)]);
    let mut repo = Repository::init(env.storage("stale"), small_params())
        .await
        .unwrap();
    backup(&mut repo, source("a.bin"), opts()).await.unwrap();
    backup(&mut repo, source("b.bin"), opts()).await.unwrap();
    forget(&repo, &keep_last_of_host(1)).await.unwrap();
    let mut stale = Repository::open(env.storage("stale")).await.unwrap();
    assert!(
        !stale.index().is_empty(),
        "opened while the pack is indexed"
    );
    prune_deletes_what_it_marked(&mut repo).await;

    let (_, snap) = backup(&mut stale, source("a.bin"), opts()).await.unwrap();
    assert_clean_and_restored(&env, "stale", &snap, "a.bin", &pseudo_random(3 << 20, 7)).await;
}

/// Runs prune twice with no grace period: marks, then deletes.
pub(crate) async fn prune_deletes_what_it_marked(repo: &mut Repository<kura_repo::S3Storage>) {
    prune(repo, Duration::ZERO).await.unwrap();
    let report = prune(repo, Duration::ZERO).await.unwrap();
    assert!(report.deleted > 0, "{report:?}");
}

/// Checks the repository at `prefix` (reading every pack) from a fresh handle, and restores
/// `snap`, whose one file `name` must hold `want`.
async fn assert_clean_and_restored(
    env: &Env,
    prefix: &str,
    snap: &kura_repo::Snapshot,
    name: &str,
    want: &[u8],
) {
    let mut fresh = Repository::open(env.storage(prefix)).await.unwrap();
    let report = check(&mut fresh, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    let out = tempfile::tempdir().unwrap();
    restore(&fresh, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(std::fs::read(out.path().join(name)).unwrap() == want);
}

#[tokio::test(flavor = "multi_thread")]
async fn forget_then_prune_twice_frees_only_the_forgotten_data() {
    let env = Env::start().await;
    let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(old.path().join("old.bin"), pseudo_random(3 << 20, 1)).unwrap();
    std::fs::write(new.path().join("new.bin"), pseudo_random(3 << 20, 2)).unwrap();
    let mut repo = Repository::init(env.storage("gc"), small_params())
        .await
        .unwrap();
    backup(
        &mut repo,
        Source::Paths(vec![old.path().join("old.bin")]),
        opts(),
    )
    .await
    .unwrap();
    let (_, kept) = backup(
        &mut repo,
        Source::Paths(vec![new.path().join("new.bin")]),
        opts(),
    )
    .await
    .unwrap();
    let before = pack_count(&env, "gc");

    let report = forget(&repo, &keep_last_of_host(1)).await.unwrap();
    assert_eq!((report.kept().len(), report.removed().len()), (1, 1));
    let mut repo = repo;
    let first = prune(&mut repo, Duration::ZERO).await.unwrap();
    assert!(first.marked > 0 && first.deleted == 0, "{first:?}");
    assert_eq!(pack_count(&env, "gc"), before, "phase 1 only marks");
    let second = prune(&mut repo, Duration::ZERO).await.unwrap();
    assert_eq!(second.deleted, first.marked, "{second:?}");
    assert!(pack_count(&env, "gc") < before);

    let mut repo = Repository::open(env.storage("gc")).await.unwrap();
    let report = check(&mut repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    let out = tempfile::tempdir().unwrap();
    restore(&repo, &kept.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(out.path().join("new.bin")).unwrap(),
        pseudo_random(3 << 20, 2)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_backups_beside_prune_leave_every_snapshot_whole() {
    let env = Env::start().await;
    Repository::init(env.storage("many"), small_params())
        .await
        .unwrap();
    let dirs: Vec<_> = (0..3u64)
        .map(|n| {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join("shared.bin"), pseudo_random(2 << 20, 1000)).unwrap();
            std::fs::write(d.path().join("own.bin"), pseudo_random(2 << 20, n)).unwrap();
            d
        })
        .collect();
    let run = |path: std::path::PathBuf| {
        let storage = env.storage("many");
        async move {
            let mut repo = Repository::open(storage).await.unwrap();
            backup(&mut repo, Source::Paths(vec![path]), opts())
                .await
                .unwrap()
        }
    };
    let pruner = async {
        let mut repo = Repository::open(env.storage("many")).await.unwrap();
        for _ in 0..3 {
            // The default grace: marks may be written, nothing in use is deleted.
            prune(&mut repo, Duration::from_hours(24)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let ((a, _), (b, _), (c, _), ()) = tokio::join!(
        run(dirs[0].path().into()),
        run(dirs[1].path().into()),
        run(dirs[2].path().into()),
        pruner
    );
    let mut repo = Repository::open(env.storage("many")).await.unwrap();
    let report = check(&mut repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    for (snap, dir) in [a, b, c].iter().zip(&dirs) {
        let s = repo.load_snapshot(snap).await.unwrap();
        let out = tempfile::tempdir().unwrap();
        restore(&repo, &s.tree, out.path(), &Include::all())
            .await
            .unwrap();
        let name = dir.path().file_name().unwrap();
        for f in ["shared.bin", "own.bin"] {
            assert_eq!(
                std::fs::read(dir.path().join(f)).unwrap(),
                std::fs::read(out.path().join(name).join(f)).unwrap()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn check_read_data_names_the_file_behind_a_damaged_pack() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("x.bin"), pseudo_random(600_000, 5)).unwrap();
    let mut repo = Repository::init(env.storage("chk"), small_params())
        .await
        .unwrap();
    let (snap_id, snap) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert!(check(&mut repo, true).await.unwrap().is_clean());

    // Damage the pack that holds x.bin's first chunk.
    let root = repo.read_tree(&snap.tree).await.unwrap();
    let dir = repo
        .read_tree(&root.nodes[0].subtree.unwrap())
        .await
        .unwrap();
    let kura_repo::Content::Blob { blob } = &dir.nodes[0].content.as_ref().unwrap()[0] else {
        panic!("a data chunk")
    };
    let pack = repo.index().get(blob).unwrap().pack.to_hex();
    let file = env
        .stored_files()
        .into_iter()
        .find(|f| f.ends_with(&pack))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[1000] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();

    let report = check(&mut repo, true).await.unwrap();
    assert!(!report.is_clean());
    assert_eq!(report.damaged_packs.len(), 1, "{report:?}");
    let name = src
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let expected = format!("snapshot {}: /{name}/x.bin", snap_id.short());
    assert!(
        report.affected.iter().any(|a| a == &expected),
        "{:?} lacks {expected}",
        report.affected
    );
    // Without --read-data the damage is invisible: the pack exists.
    assert!(check(&mut repo, false).await.unwrap().is_clean());
}

/// A pack marked past the grace period but written again within it (by a backup this
/// prune cannot see yet) stays: both ages are the storage's.
#[tokio::test(flavor = "multi_thread")]
async fn prune_keeps_a_marked_pack_that_was_written_again_within_the_grace_period() {
    use kura_repo::Storage as _;
    let env = Env::start().await;
    let mut repo = Repository::init(env.storage("regrow"), small_params())
        .await
        .unwrap();
    let pack = kura_repo::Id([7; 32]);
    let put_pack = async || {
        repo.storage()
            .put(
                kura_repo::FileType::Pack,
                &pack.to_hex(),
                bytes::Bytes::from_static(b"rebuilt pack"),
            )
            .await
            .unwrap();
    };
    put_pack().await;
    // The mark's `time` says nothing to prune: its age is its object's.
    let mark = serde_json::json!({ "time": "2999-01-01T00:00:00Z", "packs": [pack.to_hex()] });
    let mark = mark.to_string().into_bytes();
    repo.storage()
        .put(
            kura_repo::FileType::PruneMark,
            &repo.config().object_id(&mark).to_hex(),
            bytes::Bytes::from(mark),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    put_pack().await;
    let report = prune(&mut repo, Duration::from_secs(2)).await.unwrap();
    assert_eq!((report.deleted, report.rescued), (0, 1), "{report:?}");
    assert!(
        repo.storage()
            .exists(kura_repo::FileType::Pack, &pack.to_hex())
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn diff_lists_added_removed_and_changed_paths() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let root = src.path().join("app");
    std::fs::create_dir_all(root.join("keep")).unwrap();
    std::fs::write(root.join("keep/same.txt"), b"same").unwrap();
    std::fs::write(root.join("edit.txt"), b"before").unwrap();
    std::fs::write(root.join("gone.txt"), b"gone").unwrap();
    let mut repo = Repository::init(env.storage("diff"), small_params())
        .await
        .unwrap();
    let (_, one) = backup(&mut repo, Source::Paths(vec![root.clone()]), opts())
        .await
        .unwrap();
    std::fs::write(root.join("edit.txt"), b"after!").unwrap();
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    std::fs::create_dir_all(root.join("new")).unwrap();
    std::fs::write(root.join("new/file.txt"), b"new").unwrap();
    let (_, two) = backup(&mut repo, Source::Paths(vec![root.clone()]), opts())
        .await
        .unwrap();
    let changes: Vec<(char, String)> = kura_repo::diff(&repo, &one.tree, &two.tree)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.kind, c.path))
        .collect();
    assert_eq!(
        changes,
        [
            ('M', "/app/edit.txt".to_string()),
            ('-', "/app/gone.txt".to_string()),
            ('+', "/app/new".to_string()),
            ('+', "/app/new/file.txt".to_string()),
        ]
    );
    assert!(
        kura_repo::diff(&repo, &two.tree, &two.tree)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Fault injection no real server times on demand: the first object of type `ft` read is
/// deleted just before it is read, as a prune does between another's listing and read
/// (an index object it replaced, a mark it finished).
pub(crate) struct DeletedBeforeFirstRead {
    inner: kura_repo::S3Storage,
    ft: FileType,
    done: std::sync::atomic::AtomicBool,
}

impl DeletedBeforeFirstRead {
    pub(crate) fn new(inner: kura_repo::S3Storage, ft: FileType) -> Self {
        Self {
            inner,
            ft,
            done: false.into(),
        }
    }

    pub(crate) fn deleted(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl kura_repo::Storage for DeletedBeforeFirstRead {
    async fn put(&self, ft: FileType, name: &str, data: bytes::Bytes) -> kura_repo::Result<()> {
        self.inner.put(ft, name, data).await
    }
    async fn create(
        &self,
        ft: FileType,
        name: &str,
        data: bytes::Bytes,
    ) -> kura_repo::Result<bool> {
        self.inner.create(ft, name, data).await
    }
    async fn get(&self, ft: FileType, name: &str) -> kura_repo::Result<bytes::Bytes> {
        if ft == self.ft && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.inner.delete(ft, name).await?;
        }
        self.inner.get(ft, name).await
    }
    async fn get_range(
        &self,
        ft: FileType,
        name: &str,
        offset: u64,
        len: u64,
    ) -> kura_repo::Result<bytes::Bytes> {
        self.inner.get_range(ft, name, offset, len).await
    }
    async fn exists(&self, ft: FileType, name: &str) -> kura_repo::Result<bool> {
        self.inner.exists(ft, name).await
    }
    async fn list(&self, ft: FileType) -> kura_repo::Result<Vec<(String, u64)>> {
        self.inner.list(ft).await
    }
    async fn delete(&self, ft: FileType, name: &str) -> kura_repo::Result<()> {
        self.inner.delete(ft, name).await
    }
    async fn modified(&self, ft: FileType, name: &str) -> kura_repo::Result<Option<i64>> {
        self.inner.modified(ft, name).await
    }
}

/// Regression: opening a repository failed with NotFound when a prune deleted an index
/// object between the listing and its read. Now the index objects are listed again.
#[tokio::test(flavor = "multi_thread")]
async fn an_index_object_deleted_between_listing_and_read_is_listed_again() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(1 << 20, 3)).unwrap();
    std::fs::write(src.path().join("b.bin"), pseudo_random(1 << 20, 4)).unwrap();
    let mut repo = Repository::init(env.storage("relist"), small_params())
        .await
        .unwrap();
    for f in ["a.bin", "b.bin"] {
        backup(&mut repo, Source::Paths(vec![src.path().join(f)]), opts())
            .await
            .unwrap();
    }
    let listed = env.storage("relist").list(FileType::Index).await.unwrap();
    assert!(listed.len() >= 2, "{listed:?}");
    let faulty = DeletedBeforeFirstRead::new(env.storage("relist"), FileType::Index);
    let opened = Repository::open(faulty).await.unwrap();
    assert!(opened.storage().deleted());
    assert!(!opened.index().is_empty(), "the other objects were read");
    let left = env.storage("relist").list(FileType::Index).await.unwrap();
    assert_eq!(left.len(), listed.len() - 1);
}

/// A prune mark deleted (its prune finished) between a backup's listing of the marks and
/// its read of that mark is gone, not an error.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_goes_on_when_a_prune_mark_is_deleted_before_it_reads_it() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(1 << 20, 5)).unwrap();
    std::fs::write(src.path().join("b.bin"), pseudo_random(1 << 20, 6)).unwrap();
    let source = |name: &str| Source::Paths(vec![src.path().join(name)]);
    let mut repo = Repository::init(env.storage("marks"), small_params())
        .await
        .unwrap();
    backup(&mut repo, source("a.bin"), opts()).await.unwrap();
    backup(&mut repo, source("b.bin"), opts()).await.unwrap();
    forget(&repo, &keep_last_of_host(1)).await.unwrap();
    prune(&mut repo, Duration::from_hours(1)).await.unwrap();
    let marks = env
        .storage("marks")
        .list(FileType::PruneMark)
        .await
        .unwrap();
    assert_eq!(marks.len(), 1, "phase 1 wrote a mark");
    let faulty = DeletedBeforeFirstRead::new(env.storage("marks"), FileType::PruneMark);
    let mut opened = Repository::open(faulty).await.unwrap();
    let (_, snap) = backup(&mut opened, source("a.bin"), opts()).await.unwrap();
    assert!(opened.storage().deleted());
    assert_eq!(snap.summary.files, 1);
}

/// Regression: a backup did not record the index objects it wrote, so on a handle whose
/// listing then matched the index objects it was loaded from (a prune had deleted one the
/// handle wrote), the next backup skipped the reload and reused blobs of deleted packs.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_backup_on_one_handle_sees_a_prune_of_what_the_first_wrote() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("x.bin"), pseudo_random(3 << 20, 21)).unwrap();
    std::fs::write(src.path().join("y.bin"), pseudo_random(3 << 20, 22)).unwrap();
    let source = |name: &str| Source::Paths(vec![src.path().join(name)]);
    let mut held = Repository::init(env.storage("held"), small_params())
        .await
        .unwrap();
    backup(&mut held, source("x.bin"), opts()).await.unwrap();
    let (y_id, _) = backup(&mut held, source("y.bin"), opts()).await.unwrap();
    // `kura forget` of y's snapshot, then a prune from elsewhere deletes y's packs and the
    // index object that listed only them.
    env.storage("held")
        .delete(FileType::Snapshot, &y_id.to_hex())
        .await
        .unwrap();
    let mut other = Repository::open(env.storage("held")).await.unwrap();
    prune_deletes_what_it_marked(&mut other).await;

    let (_, snap) = backup(&mut held, source("y.bin"), opts()).await.unwrap();
    assert_clean_and_restored(&env, "held", &snap, "y.bin", &pseudo_random(3 << 20, 22)).await;
}

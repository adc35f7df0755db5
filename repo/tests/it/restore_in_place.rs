//! Restoring into a directory that already holds files (issue 22 item 9): each file is
//! written under a temporary name in its directory and renamed over the old one, so a
//! hard link elsewhere keeps its own content, old extended attributes go with the old
//! inode, a FIFO planted at a file's name is replaced rather than opened, and a file
//! whose content fails keeps its old version. A restore stopped part-way leaves its
//! marker at the target's top (files that were being written under their own names may
//! be short), which only a whole restore of the same snapshot that writes every file
//! takes away; restores running at once leave it to the last one.

use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use kura_repo::{FileType, Include, Repository, Source, UNFINISHED, backup, restore};

use crate::backup_restore::{
    damage, listing, opts, packs, set_xattr, small_params, snapshot_of_data,
};
use crate::harness::{Env, Hook, Hooked, Op, pseudo_random};
use crate::small_files::tree_packs;

/// The names under `dir` that a restore left behind besides the snapshot's.
fn leftovers(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".kura"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_over_hard_links_gives_each_name_its_own_content() {
    let env = Env::start().await;
    let files = [
        ("a".to_string(), b"the snapshot's a".to_vec()),
        ("b".to_string(), b"the snapshot's b, longer".to_vec()),
    ];
    let (repo, snap) = snapshot_of_data(&env, "links", &files).await;
    let out = tempfile::tempdir().unwrap();
    let data = out.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a"), b"old").unwrap();
    std::fs::hard_link(data.join("a"), data.join("b")).unwrap();
    std::fs::hard_link(data.join("a"), out.path().join("elsewhere")).unwrap();

    restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert_eq!(std::fs::read(data.join("a")).unwrap(), files[0].1);
    assert_eq!(std::fs::read(data.join("b")).unwrap(), files[1].1);
    assert_eq!(
        std::fs::read(out.path().join("elsewhere")).unwrap(),
        b"old",
        "a link outside the snapshot keeps the old content"
    );
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
}

#[tokio::test(flavor = "multi_thread")]
async fn old_extended_attributes_do_not_survive_a_restore_over_a_file() {
    let env = Env::start().await;
    let files = [("a".to_string(), b"content".to_vec())];
    let (repo, snap) = snapshot_of_data(&env, "xattrs", &files).await;
    let out = tempfile::tempdir().unwrap();
    let data = out.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a"), b"old").unwrap();
    set_xattr(&data.join("a"), "user.planted", b"by someone else");

    restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let names = rustix::fs::listxattr(data.join("a"), &mut [0u8; 1024][..]).unwrap();
    assert_eq!(names, 0, "no extended attribute is left");
}

/// A FIFO where the snapshot has a file: opening it for writing would wait for a reader
/// for ever. It is replaced, and the restore finishes.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_planted_at_a_files_name_does_not_hang_the_restore() {
    let env = Env::start().await;
    let files = [("a".to_string(), b"content".to_vec())];
    let (repo, snap) = snapshot_of_data(&env, "fifo", &files).await;
    let out = tempfile::tempdir().unwrap();
    let data = out.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let fifo = data.join("a");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();

    // A watchdog frees a writer stuck in open(2) by opening the FIFO's other end, so that
    // the test fails rather than hangs.
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, fifo) = (done.clone(), fifo.clone());
        std::thread::spawn(move || {
            for _ in 0..300 {
                if done.load(SeqCst) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let mut drained = Vec::new();
            let _ = std::fs::File::open(&fifo).map(|mut f| f.read_to_end(&mut drained));
            true
        })
    };
    let restored = restore(&repo, &snap.tree, out.path(), &Include::all()).await;
    done.store(true, SeqCst);
    assert!(!watchdog.join().unwrap(), "the restore hung on the FIFO");
    restored.unwrap();
    assert_eq!(std::fs::read(&fifo).unwrap(), b"content");
}

/// The content of a file fails (its pack is damaged): the file that was there stays as
/// it was, instead of being truncated and then removed.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_whose_content_fails_keeps_its_old_version() {
    let env = Env::start().await;
    let files = [("a".to_string(), pseudo_random(300_000, 31))];
    let (repo, snap) = snapshot_of_data(&env, "keep-old", &files).await;
    // Only the data packs: the trees stay readable.
    let data_packs: Vec<_> = packs(&env)
        .into_iter()
        .filter(|p| std::fs::metadata(p).unwrap().len() > 100_000)
        .collect();
    assert!(!data_packs.is_empty());
    damage(&data_packs, true);
    let out = tempfile::tempdir().unwrap();
    let data = out.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a"), b"the old version").unwrap();

    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(
        matches!(summary.failed.as_slice(), [f] if f.starts_with("data/a: ")),
        "{:?}",
        summary.failed
    );
    assert_eq!(std::fs::read(data.join("a")).unwrap(), b"the old version");
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
}

/// Fault-injecting hook: after the first `free` range GETs of data packs (not of `trees`),
/// none is answered until `gate` is opened, as for a restore that waits (or is killed
/// while it waits).
struct HangAfter {
    trees: std::collections::HashSet<String>,
    free: std::sync::atomic::AtomicUsize,
    /// GETs that have come to the gate.
    waiting: std::sync::atomic::AtomicUsize,
    gate: tokio::sync::Semaphore,
}

impl HangAfter {
    /// Lets every GET waiting now, and every later one, through.
    fn open(&self) {
        self.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }
}

impl Hook for Arc<HangAfter> {
    async fn before(&self, op: Op, ft: FileType, name: &str) -> kura_repo::Result<()> {
        if (op, ft) == (Op::GetRange, FileType::Pack)
            && !self.trees.contains(name)
            && self
                .free
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_err()
        {
            self.waiting.fetch_add(1, SeqCst);
            let _ = self.gate.acquire().await;
        }
        Ok(())
    }
}

/// A restore through a [`HangAfter`] hook, made its marker and waiting on its GETs.
struct Hung {
    task: tokio::task::JoinHandle<kura_repo::Result<kura_repo::RestoreSummary>>,
    hook: Arc<HangAfter>,
}

/// Starts a restore of `tree` (the entries `include` selects) into `target` from
/// repository `bucket` whose data GETs wait once `free` were answered, and returns it once
/// it has made its marker and one GET waits; aborting the task stops it as a kill would.
async fn hung_restore(
    env: &Env,
    bucket: &str,
    repo: &Repository<kura_repo::S3Storage>,
    tree: kura_repo::Id,
    target: &std::path::Path,
    include: Include,
    free: usize,
) -> Hung {
    let hook = Arc::new(HangAfter {
        trees: tree_packs(repo, tree).await,
        free: free.into(),
        waiting: 0.into(),
        gate: tokio::sync::Semaphore::new(0),
    });
    let hanging = Repository::open(Hooked {
        inner: env.storage(bucket),
        hook: hook.clone(),
    })
    .await
    .unwrap();
    let task = {
        let target = target.to_path_buf();
        tokio::spawn(async move { restore(&hanging, &tree, &target, &include).await })
    };
    let waited = tokio::time::timeout(Duration::from_secs(2), async {
        while hook.waiting.load(SeqCst) == 0 || !target.join(UNFINISHED).is_file() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the restore made its marker and waits");
    Hung { task, hook }
}

/// A restore stopped part-way: its task aborted while it waits on its GETs.
async fn stop(hung: Hung) {
    hung.task.abort();
    assert!(
        hung.task.await.is_err(),
        "the restore was to wait on its GETs"
    );
}

/// Three directories of 100 small files each under `data` (one chunk each, about 3 MiB
/// in all, so that a restore reads them in several runs).
fn small_files_in_three_dirs(data: &std::path::Path) {
    for d in 0..3usize {
        let dir = data.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..100usize {
            let content = pseudo_random(6000 + (d * 100 + i) * 31 % 9000, (d * 100 + i) as u64);
            std::fs::write(dir.join(format!("f{i:02}")), content).unwrap();
        }
    }
}

/// A whole restore of `tree` into `target`, which must fail no entry.
async fn whole_restore(
    repo: &Repository<kura_repo::S3Storage>,
    tree: &kura_repo::Id,
    target: &std::path::Path,
) {
    let summary = restore(repo, tree, target, &Include::all()).await.unwrap();
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
}

/// Repository `bucket` with one snapshot of [`small_files_in_three_dirs`] under `data` in
/// the returned directory.
async fn three_dirs_backed_up(
    env: &Env,
    bucket: &str,
) -> (
    tempfile::TempDir,
    Repository<kura_repo::S3Storage>,
    kura_repo::Snapshot,
) {
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    small_files_in_three_dirs(&data);
    let mut repo = Repository::init(env.storage(bucket), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data]), opts())
        .await
        .unwrap();
    (src, repo, snap)
}

/// A restore stopped part-way, then a whole restore into the same target that cannot
/// read the files' content (every data GET fails): it wrote none of them anew, so the
/// stopped restore's short files are still there, and so is the marker.
#[tokio::test(flavor = "multi_thread")]
async fn a_whole_restore_that_fails_its_files_keeps_the_marker_a_stopped_restore_left() {
    let env = Env::start().await;
    let (_src, repo, snap) = three_dirs_backed_up(&env, "fails").await;
    let out = tempfile::tempdir().unwrap();
    stop(
        hung_restore(
            &env,
            "fails",
            &repo,
            snap.tree,
            out.path(),
            Include::all(),
            1,
        )
        .await,
    )
    .await;

    let failing = Repository::open(Hooked {
        inner: env.storage("fails"),
        hook: FailData {
            trees: tree_packs(&repo, snap.tree).await,
        },
    })
    .await
    .unwrap();
    let outcome = restore(&failing, &snap.tree, out.path(), &Include::all()).await;
    assert!(
        outcome.as_ref().map_or(true, |s| !s.failed.is_empty()),
        "every file was to fail"
    );
    assert!(
        out.path().join(UNFINISHED).is_file(),
        "a whole restore that did not write every file keeps the marker"
    );
}

/// A restore of snapshot A stopped part-way, then a whole restore of snapshot B into the
/// same target: B's files are whole, but A's files that B does not hold may still be
/// short, so the marker stays, until a whole restore of A.
#[tokio::test(flavor = "multi_thread")]
async fn a_whole_restore_of_another_snapshot_keeps_the_marker_that_one_of_the_stopped_snapshot_takes_away()
 {
    let env = Env::start().await;
    let (src, mut repo, a) = three_dirs_backed_up(&env, "another").await;
    let data = src.path().join("data");
    std::fs::remove_dir_all(data.join("d2")).unwrap();
    std::fs::write(data.join("d0").join("f00"), b"changed for B").unwrap();
    let (_, b) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    assert_ne!(a.tree, b.tree);
    let out = tempfile::tempdir().unwrap();
    stop(
        hung_restore(
            &env,
            "another",
            &repo,
            a.tree,
            out.path(),
            Include::all(),
            1,
        )
        .await,
    )
    .await;

    whole_restore(&repo, &b.tree, out.path()).await;
    assert!(
        out.path().join(UNFINISHED).is_file(),
        "a whole restore of another snapshot keeps the marker"
    );
    whole_restore(&repo, &a.tree, out.path()).await;
    assert!(
        !out.path().join(UNFINISHED).exists(),
        "a whole restore of the stopped snapshot takes the marker away"
    );
}

/// Two restores of some paths into one target at once, the first ending while the second
/// still runs: the first leaves the marker to the second, which takes it away as it ends,
/// since neither stopped part-way.
#[tokio::test(flavor = "multi_thread")]
async fn two_restores_at_once_that_both_end_take_the_marker_away() {
    let env = Env::start().await;
    let (_src, repo, snap) = three_dirs_backed_up(&env, "at-once").await;
    let out = tempfile::tempdir().unwrap();
    let some = |dir: &str| Include::new(&[format!("data/{dir}")]).unwrap();
    let first = hung_restore(&env, "at-once", &repo, snap.tree, out.path(), some("d0"), 0).await;
    let second = hung_restore(&env, "at-once", &repo, snap.tree, out.path(), some("d1"), 0).await;
    first.hook.open();
    let ended = first.task.await.unwrap().unwrap();
    assert!(ended.failed.is_empty(), "{:?}", ended.failed);
    assert!(
        out.path().join(UNFINISHED).is_file(),
        "the second restore still runs"
    );
    second.hook.open();
    let ended = second.task.await.unwrap().unwrap();
    assert!(ended.failed.is_empty(), "{:?}", ended.failed);
    assert!(
        !out.path().join(UNFINISHED).exists(),
        "both restores ended, and the last takes the marker away"
    );
}

/// A restore stopped while it writes a large file under a temporary name leaves that file:
/// a restore beside it while it runs leaves the file be, and the next restore into the
/// target, which began after it had stopped, removes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_after_a_stopped_one_removes_the_temporary_files_that_one_left() {
    let env = Env::start().await;
    // Many chunks in several packs: written by the walk under a temporary name, with
    // more than one range GET.
    let files = [("large".to_string(), pseudo_random(3 << 20, 7))];
    let (repo, snap) = snapshot_of_data(&env, "leftovers", &files).await;
    let out = tempfile::tempdir().unwrap();
    let hung = hung_restore(
        &env,
        "leftovers",
        &repo,
        snap.tree,
        out.path(),
        Include::all(),
        1,
    )
    .await;
    let left = leftovers(&out.path().join("data"));
    assert!(
        matches!(left.as_slice(), [t] if t.starts_with(".kura-restore-")),
        "{left:?}"
    );
    // A restore beside it, while it still writes, leaves its temporary file be.
    whole_restore(&repo, &snap.tree, out.path()).await;
    assert_eq!(leftovers(&out.path().join("data")), left);
    stop(hung).await;
    // Another restore's temporary file, of no stopped restore's entry, stays.
    let other = out
        .path()
        .join("data")
        .join(".kura-restore-0000000000000000-00");
    std::fs::write(&other, b"not a stopped restore's").unwrap();

    whole_restore(&repo, &snap.tree, out.path()).await;
    assert_eq!(
        leftovers(&out.path().join("data")),
        vec![".kura-restore-0000000000000000-00".to_string()]
    );
    assert!(!out.path().join(UNFINISHED).exists());
    assert_eq!(
        std::fs::read(out.path().join("data/large")).unwrap(),
        files[0].1
    );
}

/// A snapshot with an entry named like the marker at its top (a backup of a target that
/// a killed restore had marked, say): the restore keeps the name for its marker and lists
/// the entry as not restored, instead of putting it over the marker.
#[tokio::test(flavor = "multi_thread")]
async fn an_entry_named_like_the_marker_at_a_snapshots_top_is_not_restored_over_it() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let named = src.path().join(UNFINISHED);
    std::fs::write(&named, b"a file of the snapshot").unwrap();
    std::fs::create_dir(src.path().join("data")).unwrap();
    std::fs::write(src.path().join("data/a"), b"a").unwrap();
    let mut repo = Repository::init(env.storage("named"), small_params())
        .await
        .unwrap();
    let paths = vec![named, src.path().join("data")];
    let (_, snap) = backup(&mut repo, Source::Paths(paths), opts())
        .await
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(
        matches!(summary.skipped.as_slice(), [s] if s.starts_with(UNFINISHED)),
        "{:?}",
        summary.skipped
    );
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    assert!(
        !out.path().join(UNFINISHED).exists(),
        "the marker went, and nothing is in its place"
    );
    assert_eq!(std::fs::read(out.path().join("data/a")).unwrap(), b"a");
}

/// A file someone linked at the marker's name (a hard link to a file of theirs): the
/// restore goes without a marker and writes nothing into it.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_writes_nothing_into_a_file_linked_at_the_markers_name() {
    let env = Env::start().await;
    let files = [("a".to_string(), b"a".to_vec())];
    let (repo, snap) = snapshot_of_data(&env, "linked", &files).await;
    let out = tempfile::tempdir().unwrap();
    let theirs = out.path().join("theirs");
    std::fs::write(&theirs, b"their file").unwrap();
    std::fs::hard_link(&theirs, out.path().join(UNFINISHED)).unwrap();
    whole_restore(&repo, &snap.tree, out.path()).await;
    assert_eq!(std::fs::read(&theirs).unwrap(), b"their file");
    assert_eq!(std::fs::read(out.path().join("data/a")).unwrap(), b"a");
}

/// Fault-injecting hook: every range GET of a data pack (not of `trees`) fails.
struct FailData {
    trees: std::collections::HashSet<String>,
}

impl Hook for FailData {
    async fn before(&self, op: Op, ft: FileType, name: &str) -> kura_repo::Result<()> {
        if (op, ft) == (Op::GetRange, FileType::Pack) && !self.trees.contains(name) {
            return Err(kura_repo::RepoError::Storage {
                op: "GetObject",
                key: name.into(),
                detail: "the test's failing data".into(),
            });
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_stopped_part_way_leaves_its_marker_which_only_a_whole_restore_after_it_takes_away()
 {
    let env = Env::start().await;
    let (src, repo, snap) = three_dirs_backed_up(&env, "stopped").await;
    let data = src.path().join("data");
    let out = tempfile::tempdir().unwrap();

    // The first restore hangs on its GETs, still running, while a whole one ends beside
    // it: the marker stays, since the first one may be writing.
    let running = hung_restore(
        &env,
        "stopped",
        &repo,
        snap.tree,
        out.path(),
        Include::all(),
        1,
    )
    .await;
    whole_restore(&repo, &snap.tree, out.path()).await;
    assert!(
        out.path().join(UNFINISHED).is_file(),
        "a restore that ends while another one still runs leaves the marker to it"
    );
    stop(running).await;
    assert!(
        out.path().join(UNFINISHED).is_file(),
        "a restore stopped part-way says so"
    );
    // A restore of one directory leaves the others as the stopped one left them.
    let part = restore(
        &repo,
        &snap.tree,
        out.path(),
        &Include::new(&["data/d0".to_string()]).unwrap(),
    )
    .await
    .unwrap();
    assert!(part.failed.is_empty(), "{:?}", part.failed);
    assert!(
        out.path().join(UNFINISHED).is_file(),
        "a partial restore keeps the marker a stopped one left"
    );

    whole_restore(&repo, &snap.tree, out.path()).await;
    assert_eq!(leftovers(out.path()), Vec::<String>::new());
    let (want, got) = (listing(&data), listing(&out.path().join("data")));
    assert_eq!(
        want.len(),
        got.len(),
        "{:?}",
        got.iter()
            .map(|e| &e.rel)
            .filter(|r| r.contains(".kura"))
            .collect::<Vec<_>>()
    );
    for (w, g) in want.iter().zip(&got) {
        assert!(
            w == g,
            "{} differs: mtime {:?} / {:?}, mode {:o} / {:o}, {} / {} bytes",
            w.rel,
            w.mtime,
            g.mtime,
            w.mode,
            g.mode,
            w.bytes.len(),
            g.bytes.len()
        );
    }
}

/// Symlinks and further hard-link names are made under a temporary name and renamed over
/// what stands at their names (`write::make_over`): a restore into a target that holds
/// the same tree already (a second restore) replaces them and leaves no temporary name.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_restore_over_links_and_symlinks_replaces_them_and_leaves_nothing_behind() {
    use std::os::unix::fs::MetadataExt as _;
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a"), b"linked twice").unwrap();
    std::fs::hard_link(data.join("a"), data.join("b")).unwrap();
    std::os::unix::fs::symlink("a", data.join("l")).unwrap();
    let mut repo = Repository::init(env.storage("relinks"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data]), opts())
        .await
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        whole_restore(&repo, &snap.tree, out.path()).await;
        let got = out.path().join("data");
        let (a, b) = (
            std::fs::metadata(got.join("a")).unwrap(),
            std::fs::metadata(got.join("b")).unwrap(),
        );
        assert_eq!(a.ino(), b.ino(), "b is a link to a");
        assert_eq!(
            std::fs::read_link(got.join("l")).unwrap(),
            std::path::Path::new("a")
        );
        assert!(leftovers(&got).is_empty(), "{:?}", leftovers(&got));
    }
}

//! Restoring many small files (issue 27): a directory's files of one chunk are read pack by
//! pack, a range GET per run of neighbouring blobs, not one per file, and every file still
//! comes back whole, with its metadata, also where files share content.

use std::os::unix::fs::PermissionsExt as _;

use std::sync::atomic::Ordering::SeqCst;

use kura_repo::{FileType, Include, Repository, Source, backup, restore};

use crate::backup_restore::{listing, opts, small_params};
use crate::harness::{Env, Hook, Hooked, InFlight, Op, pseudo_random};

/// Before: 400 files of up to 3 KiB took 400 range GETs (one per file, 16 at once), which
/// made a tree of small files restore three times slower than restic.
#[tokio::test(flavor = "multi_thread")]
async fn a_directory_of_small_files_is_restored_with_a_get_per_run_of_blobs_not_per_file() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    let n = 400usize;
    let mut want = Vec::new();
    for i in 0..n {
        let dir = if i % 4 == 0 { "sub" } else { "." };
        let rel = format!("{dir}/f{i:03}");
        // Every tenth empty: written with the run's files, no GET of their own.
        let len = if i % 10 == 5 {
            0
        } else {
            100 + (i * 37) % 3000
        };
        let content = pseudo_random(len, i as u64);
        std::fs::write(data.join(&rel), &content).unwrap();
        std::fs::set_permissions(
            data.join(&rel),
            // Modes a file is created with as they are, and ones it cannot be: more than
            // the umask lets through, set-ID, read-only.
            std::fs::Permissions::from_mode([0o600, 0o644, 0o666, 0o4755, 0o444][i % 5]),
        )
        .unwrap();
        want.push((rel, content));
    }
    // Two files with the same content: one blob, two files.
    std::fs::write(data.join("same-a"), b"the same bytes").unwrap();
    std::fs::write(data.join("same-b"), b"the same bytes").unwrap();
    let mut repo = Repository::init(env.storage("small"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();

    let out = tempfile::tempdir().unwrap();
    let gets = env.gets_answered().await;
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let gets = env.gets_answered().await - gets;
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    assert_eq!(summary.files, n as u64 + 2);
    let restored = out.path().join("data");
    for (rel, content) in &want {
        assert!(
            std::fs::read(restored.join(rel)).unwrap() == *content,
            "{rel}"
        );
        let src_mode = std::fs::metadata(data.join(rel))
            .unwrap()
            .permissions()
            .mode();
        let mode = std::fs::metadata(restored.join(rel))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode, src_mode, "{rel}'s mode");
    }
    for name in ["same-a", "same-b"] {
        assert_eq!(
            std::fs::read(restored.join(name)).unwrap(),
            b"the same bytes"
        );
    }
    // Trees and a few runs per pack, not a GET per file.
    assert!(
        gets < n as u64 / 10,
        "{gets} GETs for a restore of {n} small files"
    );
    let left: Vec<_> = kura_testkit::walk::files_under(&restored)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".kura-restore-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// Fault-injecting hook: each range GET of a data pack (not one of `trees`) takes as long
/// as a far store's.
struct SlowData {
    trees: std::collections::HashSet<String>,
    reads: InFlight,
}

impl Hook for std::sync::Arc<SlowData> {
    async fn before(&self, op: Op, ft: FileType, name: &str) -> kura_repo::Result<()> {
        if (op, ft) == (Op::GetRange, FileType::Pack) && !self.trees.contains(name) {
            self.reads.wait().await;
        }
        Ok(())
    }
}

/// The packs that hold the trees below `root` (backups write trees into packs of their
/// own).
pub async fn tree_packs<S: kura_repo::Storage>(
    repo: &Repository<S>,
    root: kura_repo::Id,
) -> std::collections::HashSet<String> {
    let mut packs = std::collections::HashSet::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        packs.insert(repo.index().get(&id).unwrap().pack.to_hex());
        let tree = repo.read_tree(&id).await.unwrap();
        todo.extend(tree.nodes.iter().filter_map(|n| n.subtree));
    }
    packs
}

/// Before: a directory's files were all written before the next directory's were fetched,
/// so a tree of many small directories waited on its round trips one directory at a time.
/// Directories now take their metadata only once their files are in, wherever those were
/// written from.
#[tokio::test(flavor = "multi_thread")]
async fn the_small_files_of_many_directories_are_fetched_at_once_and_each_directory_keeps_its_metadata()
 {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    let (dirs, files) = (24, 12);
    for d in 0..dirs {
        let dir = data.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..files {
            // Below the chunker's minimum (one chunk each), and about 3 MiB in all: packs
            // of 1 MiB, so the files need several range GETs however their runs are
            // planned (since 2026-12-07 a directory's subdirectories' trees come in at
            // once, and 150 KiB of files in one pack made one range GET in all).
            let content = pseudo_random(6000 + (d * 31 + i * 677) % 9000, (d * 100 + i) as u64);
            std::fs::write(dir.join(format!("f{i}")), content).unwrap();
        }
        let when = rustix::fs::Timespec {
            tv_sec: 1_000_000_000 + i64::try_from(d).unwrap() * 3600,
            tv_nsec: 0,
        };
        rustix::fs::utimensat(
            rustix::fs::CWD,
            &dir,
            &rustix::fs::Timestamps {
                last_access: when,
                last_modification: when,
            },
            rustix::fs::AtFlags::empty(),
        )
        .unwrap();
    }
    let mut repo = Repository::init(env.storage("dirs"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();

    let hook = std::sync::Arc::new(SlowData {
        trees: tree_packs(&repo, snap.tree).await,
        reads: InFlight::default(),
    });
    let slow = Repository::open(Hooked {
        inner: env.storage("dirs"),
        hook: hook.clone(),
    })
    .await
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let summary = restore(&slow, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    assert!(
        summary.metadata_failed.is_empty(),
        "{:?}",
        summary.metadata_failed
    );
    assert_eq!(summary.files, dirs as u64 * files as u64);
    let most = hook.reads.most.load(SeqCst);
    assert!(
        most >= 3,
        "at most {most} range GETs in flight for {dirs} directories of small files"
    );
    assert_eq!(listing(&data), listing(&out.path().join("data")));
}

/// A directory's subdirectories' trees lie next to each other in a pack and come in runs,
/// one range GET each (issue 27): a restore of 150 directories of one small file made 205
/// range GETs when each tree came alone, 8 with runs of up to 32.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_reads_the_trees_of_many_directories_in_a_few_range_gets() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    crate::harness::dirs_of_one_file(&data, 150);
    let mut repo = Repository::init(env.storage("tree-runs"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    let hook = std::sync::Arc::new(crate::harness::RangeGets::default());
    let counted = Repository::open(Hooked {
        inner: env.storage("tree-runs"),
        hook: hook.clone(),
    })
    .await
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let summary = restore(&counted, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    assert_eq!(summary.files, 150);
    assert_eq!(listing(&data), listing(&out.path().join("data")));
    let gets = hook.0.load(SeqCst);
    assert!(
        gets <= 12,
        "{gets} range GETs for 150 directories of one small file each"
    );
}

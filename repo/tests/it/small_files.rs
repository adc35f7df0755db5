//! Restoring many small files (issue 27): a directory's files of one chunk are read pack by
//! pack, a range GET per run of neighbouring blobs, not one per file, and every file still
//! comes back whole, with its metadata, also where files share content.

use std::os::unix::fs::PermissionsExt as _;

use kura_repo::{Include, Repository, Source, backup, restore};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, pseudo_random};

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
            std::fs::Permissions::from_mode(if i % 2 == 0 { 0o600 } else { 0o644 }),
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

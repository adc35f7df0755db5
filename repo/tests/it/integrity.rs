//! The repository never loses data (issue 22): prune refuses what it cannot account for,
//! listing survives a concurrent forget, snapshots sort by instant, `check` compares the
//! index with the packs, marks are checked against their names, and the repair commands.

use std::time::Duration;

use kura_repo::{
    Content, FileType, Id, RepoError, Repository, Source, Storage as _, backup, prune,
};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, pseudo_random};
use crate::upkeep::pack_count;

/// The index objects stored now.
async fn index_names(env: &Env, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = env
        .storage(prefix)
        .list(FileType::Index)
        .await
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    names.sort();
    names
}

/// A repository at `prefix` where snapshot 2 holds `dir/{a.bin,b.bin}`, and `a.bin`'s data
/// is indexed only by the index objects of snapshot 1 (`a.bin` alone). Returns the
/// repository, snapshot 1, the index objects snapshot 1's backup wrote, and snapshot 2.
async fn two_snapshots_sharing_a(
    env: &Env,
    prefix: &str,
    src: &std::path::Path,
) -> (
    Repository<kura_repo::S3Storage>,
    Id,
    Vec<String>,
    kura_repo::Snapshot,
) {
    std::fs::write(src.join("a.bin"), pseudo_random(1_500_000, 31)).unwrap();
    std::fs::write(src.join("b.bin"), pseudo_random(600_000, 32)).unwrap();
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    let (one, _) = backup(&mut repo, Source::Paths(vec![src.join("a.bin")]), opts())
        .await
        .unwrap();
    let first_index = index_names(env, prefix).await;
    let (_, two) = backup(&mut repo, Source::Paths(vec![src.into()]), opts())
        .await
        .unwrap();
    (repo, one, first_index, two)
}

/// The first data blob of `a.bin` in snapshot 2 (`dir/a.bin`).
async fn first_blob_of_a(
    repo: &Repository<kura_repo::S3Storage>,
    snap: &kura_repo::Snapshot,
) -> Id {
    let root = repo.read_tree(&snap.tree).await.unwrap();
    let dir = repo
        .read_tree(&root.nodes[0].subtree.unwrap())
        .await
        .unwrap();
    assert_eq!(dir.nodes[0].name().to_string_lossy(), "a.bin");
    let Content::Blob { blob } = dir.nodes[0].content.as_ref().unwrap()[0] else {
        panic!("a data chunk")
    };
    blob
}

/// Regression: an index object lost (deleted by hand, as the README once advised for a
/// damaged pack) made the packs it listed unneeded in prune's eyes, though a snapshot uses
/// their blobs: prune marked them, and its next run deleted them.
#[tokio::test(flavor = "multi_thread")]
async fn prune_refuses_when_a_blob_a_snapshot_uses_is_in_no_index_object() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let (repo, one, first_index, two) = two_snapshots_sharing_a(&env, "lost", src.path()).await;
    let a_blob = first_blob_of_a(&repo, &two).await;
    // Snapshot 1 forgotten, then its index objects lost: snapshot 2 still uses a.bin.
    let storage = env.storage("lost");
    storage
        .delete(FileType::Snapshot, &one.to_hex())
        .await
        .unwrap();
    for name in &first_index {
        storage.delete(FileType::Index, name).await.unwrap();
    }
    let packs = pack_count(&env, "lost");
    let mut repo = Repository::open(env.storage("lost")).await.unwrap();
    for _ in 0..2 {
        let got = prune(&mut repo, Duration::ZERO).await;
        let Err(RepoError::Unindexed { blobs }) = &got else {
            panic!("prune went ahead with used blobs unindexed: {got:?}");
        };
        assert!(blobs.contains(&a_blob.to_hex()), "{blobs:?}");
        let first = blobs[0][..8].to_string();
        let line = got.unwrap_err().to_string();
        assert!(
            line.contains(&first) && line.contains("repair index"),
            "{line}"
        );
    }
    assert_eq!(pack_count(&env, "lost"), packs, "nothing deleted");
    assert!(
        storage.list(FileType::PruneMark).await.unwrap().is_empty(),
        "nothing marked"
    );
}

//! `forget`: which snapshots a policy keeps, per group of host and paths, within the
//! filters given.

use kura_repo::{FileType, Id, KeepPolicy, Repository, Snapshot, Storage as _, forget};

use crate::backup_restore::small_params;
use crate::harness::Env;

/// Stores a snapshot object as a backup would (forget reads no tree, so its tree is a
/// made-up ID); its ID.
async fn put_snapshot(
    repo: &Repository<kura_repo::S3Storage>,
    time: &str,
    host: &str,
    paths: &[&str],
) -> Id {
    let snap = Snapshot {
        time: time.into(),
        host: host.into(),
        tags: vec![],
        paths: paths.iter().map(|p| (*p).to_string()).collect(),
        tree: Id([7; 32]),
        parent: None,
        incomplete: false,
        errors: vec![],
        summary: kura_repo::Summary::default(),
        program: "test".into(),
    };
    let bytes = serde_json::to_vec(&snap).unwrap();
    let id = repo.config().object_id(&bytes);
    repo.storage()
        .put(FileType::Snapshot, &id.to_hex(), bytes.into())
        .await
        .unwrap();
    id
}

async fn listed(repo: &Repository<kura_repo::S3Storage>) -> Vec<Id> {
    let mut ids: Vec<Id> = repo
        .snapshots()
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn one_node_backing_up_two_volumes_keeps_the_newest_of_each() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("volumes"), small_params())
        .await
        .unwrap();
    let a_old = put_snapshot(&repo, "2026-12-01T01:00:00Z", "node-1", &["/vol/a"]).await;
    let a_new = put_snapshot(&repo, "2026-12-02T01:00:00Z", "node-1", &["/vol/a"]).await;
    let b_new = put_snapshot(&repo, "2026-12-01T02:00:00Z", "node-1", &["/vol/b"]).await;
    forget(
        &repo,
        KeepPolicy {
            last: 1,
            ..KeepPolicy::default()
        },
        false,
    )
    .await
    .unwrap();
    let mut want = vec![a_new, b_new];
    want.sort();
    assert_eq!(listed(&repo).await, want, "a's older one goes ({a_old:?})");
}

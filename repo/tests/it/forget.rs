//! `forget`: which snapshots a policy keeps, per group of host and paths, within the
//! filters given.

use kura_repo::{
    ForgetOptions, Id, KeepPolicy, KeepReason, Repository, Snapshot, SnapshotFilter, forget,
};

use crate::backup_restore::small_params;
use crate::harness::{Env, store_snapshot};

fn snapshot(time: &str, host: &str, paths: &[&str]) -> Snapshot {
    Snapshot {
        time: time.into(),
        host: host.into(),
        tags: vec![],
        paths: paths.iter().map(|p| (*p).to_string()).collect(),
        paths_hex: None,
        tree: Id([7; 32]),
        parent: None,
        incomplete: false,
        errors: vec![],
        changed_during_backup: vec![],
        xattrs_recorded: false,
        block: None,
        summary: kura_repo::Summary::default(),
        program: "test".into(),
    }
}

/// Stores a snapshot object as a backup would (forget reads no tree, so its tree is a
/// made-up ID); its ID.
async fn put_snapshot(
    repo: &Repository<kura_repo::S3Storage>,
    time: &str,
    host: &str,
    paths: &[&str],
) -> Id {
    put(repo, &snapshot(time, host, paths)).await
}

async fn put(repo: &Repository<kura_repo::S3Storage>, snap: &Snapshot) -> Id {
    store_snapshot(repo, serde_json::to_vec(snap).unwrap()).await
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
    forget(&repo, &keep_last(1)).await.unwrap();
    let mut want = vec![a_new, b_new];
    want.sort();
    assert_eq!(listed(&repo).await, want, "a's older one goes ({a_old:?})");
}

fn keep_last(n: u32) -> ForgetOptions {
    KeepPolicy {
        last: n,
        ..KeepPolicy::default()
    }
    .into()
}

fn sorted(mut ids: Vec<Id>) -> Vec<Id> {
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn group_by_host_alone_or_one_group_keeps_fewer() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("group-by"), small_params())
        .await
        .unwrap();
    put_snapshot(&repo, "2026-12-01T01:00:00Z", "node-1", &["/vol/a"]).await;
    let b = put_snapshot(&repo, "2026-12-01T02:00:00Z", "node-1", &["/vol/b"]).await;
    let c = put_snapshot(&repo, "2026-12-01T03:00:00Z", "node-2", &["/vol/a"]).await;
    let mut by_host = keep_last(1);
    by_host.group_by = "host".parse().unwrap();
    by_host.dry_run = true;
    let report = forget(&repo, &by_host).await.unwrap();
    assert_eq!(sorted(report.kept()), sorted(vec![b, c]));
    let mut one_group = keep_last(1);
    one_group.group_by = "".parse().unwrap();
    one_group.dry_run = true;
    let report = forget(&repo, &one_group).await.unwrap();
    assert_eq!(report.kept(), [c]);
    assert_eq!(report.groups.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn filters_leave_snapshots_they_do_not_match_alone() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("filters"), small_params())
        .await
        .unwrap();
    let a1 = put_snapshot(&repo, "2026-12-01T01:00:00Z", "node-1", &["/vol/a"]).await;
    let a2 = put_snapshot(&repo, "2026-12-02T01:00:00Z", "node-1", &["/vol/a"]).await;
    let b1 = put_snapshot(&repo, "2026-12-01T01:00:00Z", "node-1", &["/vol/b"]).await;
    let b2 = put_snapshot(&repo, "2026-12-02T01:00:00Z", "node-1", &["/vol/b"]).await;
    let mut other = snapshot("2026-12-01T01:00:00Z", "node-2", &["/vol/a"]);
    other.tags = vec!["nightly".into(), "db".into()];
    let o1 = put(&repo, &other).await;
    other.time = "2026-12-02T01:00:00Z".into();
    let o2 = put(&repo, &other).await;

    // --host node-1 --path /vol/a: only a's older snapshot goes.
    let mut opts = keep_last(1);
    opts.filter = SnapshotFilter {
        hosts: vec!["node-1".into()],
        paths: vec!["/vol/a/".into()],
        tags: vec![],
    };
    let report = forget(&repo, &opts).await.unwrap();
    assert_eq!(report.removed(), [a1]);
    assert_eq!(listed(&repo).await, sorted(vec![a2, b1, b2, o1, o2]));

    // --tag nightly,db: both tags needed; node-2's older one goes.
    opts.filter = SnapshotFilter {
        tags: vec![vec!["nightly".into(), "weekly".into()]],
        ..SnapshotFilter::default()
    };
    assert!(forget(&repo, &opts).await.unwrap().removed().is_empty());
    opts.filter.tags = vec![vec!["db".into(), "nightly".into()]];
    assert_eq!(forget(&repo, &opts).await.unwrap().removed(), [o1]);
    assert_eq!(listed(&repo).await, sorted(vec![a2, b1, b2, o2]));
}

#[tokio::test(flavor = "multi_thread")]
async fn keep_within_counts_from_the_newest_snapshot_of_a_stopped_schedule() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("within"), small_params())
        .await
        .unwrap();
    // Backups stopped in 2024; keep-within 3d must not take them all.
    let old = put_snapshot(&repo, "2024-05-01T00:00:00Z", "node-1", &["/vol/a"]).await;
    let mid = put_snapshot(&repo, "2024-05-09T00:00:00Z", "node-1", &["/vol/a"]).await;
    let new = put_snapshot(&repo, "2024-05-10T00:00:00Z", "node-1", &["/vol/a"]).await;
    let opts = ForgetOptions::from(KeepPolicy {
        within: Some("3d".parse().unwrap()),
        ..KeepPolicy::default()
    });
    let report = forget(&repo, &opts).await.unwrap();
    assert_eq!(report.removed(), [old]);
    assert_eq!(listed(&repo).await, sorted(vec![mid, new]));
    assert!(
        report.groups[0]
            .keep
            .iter()
            .all(|v| v.reasons == [KeepReason::Within])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn keep_tag_keeps_a_tagged_snapshot_no_other_rule_keeps() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("keep-tag"), small_params())
        .await
        .unwrap();
    let mut s = snapshot("2026-11-01T00:00:00Z", "node-1", &["/vol/a"]);
    s.tags = vec!["release".into()];
    let tagged = put(&repo, &s).await;
    let plain = put_snapshot(&repo, "2026-11-02T00:00:00Z", "node-1", &["/vol/a"]).await;
    let newest = put_snapshot(&repo, "2026-11-03T00:00:00Z", "node-1", &["/vol/a"]).await;
    let mut opts = keep_last(1);
    opts.policy.tags = vec![vec!["release".into()]];
    let report = forget(&repo, &opts).await.unwrap();
    assert_eq!(report.removed(), [plain]);
    assert_eq!(listed(&repo).await, sorted(vec![tagged, newest]));
    let kept = &report.groups[0].keep;
    assert_eq!(
        (kept[0].id, &kept[0].reasons),
        (newest, &vec![KeepReason::Last])
    );
    assert_eq!(
        (kept[1].id, &kept[1].reasons),
        (tagged, &vec![KeepReason::Tag])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_incomplete_snapshot_takes_no_keep_slot_and_the_newest_stays() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("incomplete"), small_params())
        .await
        .unwrap();
    let incomplete_at = |time: &str| {
        let mut s = snapshot(time, "node-1", &["/vol/a"]);
        s.incomplete = true;
        s
    };
    let first = put_snapshot(&repo, "2026-11-01T00:00:00Z", "node-1", &["/vol/a"]).await;
    let older = put(&repo, &incomplete_at("2026-11-02T00:00:00Z")).await;
    let second = put_snapshot(&repo, "2026-11-03T00:00:00Z", "node-1", &["/vol/a"]).await;
    let newest = put(&repo, &incomplete_at("2026-11-04T00:00:00Z")).await;
    let mut opts = keep_last(2);
    opts.policy.daily = 2;
    let report = forget(&repo, &opts).await.unwrap();
    assert_eq!(
        sorted(report.kept()),
        sorted(vec![first, second, newest]),
        "the older incomplete one took neither a last nor a daily slot from the first"
    );
    assert_eq!(report.removed(), [older]);
    assert!(report.groups[0].remove[0].incomplete);
    let keep = &report.groups[0].keep;
    assert_eq!(
        (keep[0].id, &keep[0].reasons),
        (newest, &vec![KeepReason::Incomplete]),
        "newer than every complete snapshot: kept, but by no counted rule"
    );
    assert_eq!(listed(&repo).await, sorted(vec![first, second, newest]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_deletes_nothing_and_says_why_each_is_kept() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("dry-run"), small_params())
        .await
        .unwrap();
    let old = put_snapshot(&repo, "2026-12-01T01:00:00Z", "node-1", &["/vol/a"]).await;
    let new = put_snapshot(&repo, "2026-12-02T01:00:00Z", "node-1", &["/vol/a"]).await;
    let mut opts = keep_last(1);
    opts.policy.daily = 5;
    opts.policy.last = 0;
    opts.dry_run = true;
    let mut last = keep_last(1);
    last.dry_run = true;
    let report = forget(&repo, &last).await.unwrap();
    assert!(report.dry_run);
    assert_eq!((report.kept(), report.removed()), (vec![new], vec![old]));
    assert_eq!(
        listed(&repo).await,
        sorted(vec![old, new]),
        "nothing deleted"
    );
    let report = forget(&repo, &opts).await.unwrap();
    assert_eq!(report.groups[0].keep[1].reasons, [KeepReason::Daily]);
    assert!(
        env.objects_under("dry-run", "lease").is_empty(),
        "a dry run takes no lease"
    );
    assert!(
        forget(&repo, &ForgetOptions::default()).await.is_err(),
        "no rule: refused"
    );
    assert_eq!(listed(&repo).await, sorted(vec![old, new]));
}

/// Before: both paths were recorded as `…/\u{fffd}/data`, one group, and forget deleted
/// the other volume's only snapshot.
#[tokio::test(flavor = "multi_thread")]
async fn two_volumes_whose_paths_differ_only_in_bytes_that_are_not_utf8_are_two_groups() {
    use std::os::unix::ffi::OsStrExt as _;
    let env = Env::start().await;
    let mut repo = Repository::init(env.storage("non-utf8"), small_params())
        .await
        .unwrap();
    let top = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for byte in [0xfe_u8, 0xff] {
        let dir = top
            .path()
            .join(std::ffi::OsStr::from_bytes(&[b'v', byte]))
            .join("data");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), [byte]).unwrap();
        let (id, _) = kura_repo::backup(
            &mut repo,
            kura_repo::Source::Paths(vec![dir]),
            crate::backup_restore::opts(),
        )
        .await
        .unwrap();
        ids.push(id);
    }
    forget(&repo, &keep_last(1)).await.unwrap();
    assert_eq!(
        listed(&repo).await,
        sorted(ids),
        "each volume keeps its snapshot"
    );
}

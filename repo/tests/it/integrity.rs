//! The repository never loses data (issue 22): prune refuses what it cannot account for,
//! listing survives a concurrent forget, snapshots sort by instant, `check` compares the
//! index with the packs, marks are checked against their names, and the repair commands.

use std::time::Duration;

use bytes::Bytes;
use kura_repo::{
    Content, FileType, Id, RepoError, Repository, Source, Storage as _, backup, check, prune,
};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, Hooked, pseudo_random, store_snapshot};
use crate::sessions::Gate;
use crate::upkeep::{DeletedBeforeFirstRead, pack_count};

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

/// Snapshot 1 forgotten, then its index objects lost: snapshot 2 still uses `a.bin`,
/// whose packs no index object lists any more.
async fn forget_and_lose_index(storage: &kura_repo::S3Storage, one: Id, first_index: &[String]) {
    storage
        .delete(FileType::Snapshot, &one.to_hex())
        .await
        .unwrap();
    for name in first_index {
        storage.delete(FileType::Index, name).await.unwrap();
    }
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
    let storage = env.storage("lost");
    forget_and_lose_index(&storage, one, &first_index).await;
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

/// Regression: listing the snapshots failed with NotFound when a `forget` deleted one
/// between the listing and its read.
#[tokio::test(flavor = "multi_thread")]
async fn listing_snapshots_skips_one_forgotten_between_listing_and_reading() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(100_000, 41)).unwrap();
    let mut repo = Repository::init(env.storage("race"), small_params())
        .await
        .unwrap();
    for _ in 0..2 {
        backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
            .await
            .unwrap();
    }
    let faulty = DeletedBeforeFirstRead::new(env.storage("race"), FileType::Snapshot);
    let opened = Repository::open(faulty).await.unwrap();
    let listed = opened.snapshots().await.expect("the listing goes on");
    assert!(opened.storage().deleted());
    assert_eq!(listed.len(), 1);
}

/// Stores a snapshot object dated `time` (its root tree is not read) and returns its ID.
async fn put_snapshot(repo: &Repository<kura_repo::S3Storage>, time: &str) -> Id {
    let json = serde_json::json!({
        "time": time, "host": "h", "paths": ["/x"], "tree": "00".repeat(32),
        "program": "test",
    });
    store_snapshot(repo, json.to_string().into_bytes()).await
}

/// Regression: snapshots were sorted by the text of their time, so one taken at 09:00 UTC
/// but written with a +01:00 offset sorted after one taken at 09:30 UTC, and `latest` was
/// the older one.
#[tokio::test(flavor = "multi_thread")]
async fn snapshots_sort_by_the_instant_of_their_time_not_its_text() {
    let env = Env::start().await;
    let repo = Repository::init(env.storage("times"), small_params())
        .await
        .unwrap();
    let later = put_snapshot(&repo, "2026-12-04T09:30:00Z").await;
    let earlier = put_snapshot(&repo, "2026-12-04T10:00:00+01:00").await;
    let order: Vec<Id> = repo
        .snapshots()
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(order, [earlier, later], "oldest first");
    assert_eq!(repo.find_snapshot("latest").await.unwrap().0, later);
}

/// Regression: `check` compared the index only with the list of packs, so an index entry
/// that disagrees with its pack's header (here: a wrong offset) went unnoticed until a
/// restore read the wrong bytes.
#[tokio::test(flavor = "multi_thread")]
async fn check_finds_an_index_entry_that_disagrees_with_its_pack_header() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(600_000, 51)).unwrap();
    let mut repo = Repository::init(env.storage("hdr"), small_params())
        .await
        .unwrap();
    backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert!(check(&mut repo, false).await.unwrap().is_clean());
    // Rewrite the index object with one entry's offset off by one.
    let storage = env.storage("hdr");
    let name = index_names(&env, "hdr").await.remove(0);
    let mut json: serde_json::Value =
        serde_json::from_slice(&storage.get(FileType::Index, &name).await.unwrap()).unwrap();
    let pack = json["packs"][0]["id"].as_str().unwrap().to_string();
    let offset = &mut json["packs"][0]["blobs"][0][2];
    *offset = (offset.as_u64().unwrap() + 1).into();
    let bytes = json.to_string().into_bytes();
    let id = repo.config().object_id(&bytes);
    storage
        .put(FileType::Index, &id.to_hex(), Bytes::from(bytes))
        .await
        .unwrap();
    storage.delete(FileType::Index, &name).await.unwrap();

    let mut repo = Repository::open(env.storage("hdr")).await.unwrap();
    let report = check(&mut repo, false).await.unwrap();
    let short = &pack[..8];
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(short) && p.contains("header")),
        "no problem names pack {short}'s header: {report:?}"
    );
}

/// Regression: prune acted on a mark whose content does not match its name (damaged or
/// not written by kura) and deleted the packs it listed. Such a mark is now ignored by
/// prune and by backups, and reported.
#[tokio::test(flavor = "multi_thread")]
async fn prune_ignores_a_mark_whose_content_does_not_match_its_name() {
    let env = Env::start().await;
    let mut repo = Repository::init(env.storage("badmark"), small_params())
        .await
        .unwrap();
    let pack = Id([9; 32]);
    repo.storage()
        .put(
            FileType::Pack,
            &pack.to_hex(),
            Bytes::from_static(b"some pack"),
        )
        .await
        .unwrap();
    let mark = serde_json::json!({ "time": "2026-01-01T00:00:00Z", "packs": [pack.to_hex()] });
    let bad_name = "cd".repeat(32);
    repo.storage()
        .put(
            FileType::PruneMark,
            &bad_name,
            Bytes::from(mark.to_string()),
        )
        .await
        .unwrap();
    let report = prune(&mut repo, Duration::ZERO).await.unwrap();
    assert_eq!(report.deleted, 0, "{report:?}");
    assert_eq!(
        report.ignored_marks,
        std::slice::from_ref(&bad_name),
        "{report:?}"
    );
    assert!(
        repo.storage()
            .exists(FileType::Pack, &pack.to_hex())
            .await
            .unwrap()
    );
    let checked = check(&mut repo, false).await.unwrap();
    assert!(
        checked.problems.iter().any(|p| p.contains(&bad_name[..8])),
        "{checked:?}"
    );
}

/// The fix for the loss above: `repair index` indexes the packs again from their headers,
/// and prune then keeps them.
#[tokio::test(flavor = "multi_thread")]
async fn repair_index_rebuilds_lost_index_objects_and_prune_then_keeps_every_used_pack() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let (_, one, first_index, two) = two_snapshots_sharing_a(&env, "rebuilt", src.path()).await;
    forget_and_lose_index(&env.storage("rebuilt"), one, &first_index).await;
    let packs = pack_count(&env, "rebuilt");
    let mut repo = Repository::open(env.storage("rebuilt")).await.unwrap();
    let report = kura_repo::repair_index(&mut repo, false).await.unwrap();
    assert!(!report.added.is_empty(), "{report:?}");
    assert_eq!(report.packs, packs, "{report:?}");
    assert!(
        report.damaged.is_empty() && report.missing.is_empty(),
        "{report:?}"
    );
    for _ in 0..2 {
        prune(&mut repo, Duration::ZERO).await.unwrap();
    }
    let report = check(&mut repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    let a_blob = first_blob_of_a(&repo, &two).await;
    assert!(repo.index().contains(&a_blob));
}

/// An index object whose stored bytes are damaged makes the repository unopenable;
/// `repair index` opens it without the index and replaces the object.
#[tokio::test(flavor = "multi_thread")]
async fn repair_index_replaces_an_index_object_that_does_not_read() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let (_, _, _, two) = two_snapshots_sharing_a(&env, "unreadable", src.path()).await;
    let objects = env.objects_under("unreadable", "index");
    damage(&objects[0]);
    assert!(Repository::open(env.storage("unreadable")).await.is_err());

    let mut repo = Repository::open_unindexed(env.storage("unreadable"))
        .await
        .unwrap();
    let report = kura_repo::repair_index(&mut repo, false).await.unwrap();
    assert_eq!(report.unreadable_indexes.len(), 1, "{report:?}");
    let mut repo = Repository::open(env.storage("unreadable")).await.unwrap();
    let report = check(&mut repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(repo.index().contains(&first_blob_of_a(&repo, &two).await));
}

/// The remedy for a damaged pack the README once gave (delete its index object by hand)
/// made prune delete used packs; `repair index --read-data` leaves only the damaged pack
/// out, and the next backup stores its data again.
#[tokio::test(flavor = "multi_thread")]
async fn repair_index_with_read_data_leaves_a_damaged_pack_out_and_the_next_backup_stores_it_again()
{
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(1_500_000, 51)).unwrap();
    let mut repo = Repository::init(env.storage("damaged"), small_params())
        .await
        .unwrap();
    backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    let packs = env.objects_under("damaged", "data");
    damage(&packs[0]);
    let report = check(&mut repo, true).await.unwrap();
    assert_eq!(report.damaged_packs.len(), 1, "{report:?}");

    let report = kura_repo::repair_index(&mut repo, true).await.unwrap();
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert_eq!(report.packs, packs.len() - 1, "{report:?}");
    let (_, again) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert!(again.summary.blobs_added > 0, "{:?}", again.summary);
    let out = tempfile::tempdir().unwrap();
    kura_repo::restore(&repo, &again.tree, out.path(), &kura_repo::Include::all())
        .await
        .unwrap();
    let name = src.path().file_name().unwrap();
    assert_eq!(
        std::fs::read(src.path().join("a.bin")).unwrap(),
        std::fs::read(out.path().join(name).join("a.bin")).unwrap()
    );
    assert!(packs[0].exists(), "repair deletes no pack");
}

/// A new repository at `prefix` with one snapshot of `src`, and the pack of `a.bin`'s first
/// chunk deleted (packs fill in order: it holds only a.bin's start); returns that pack.
async fn backed_up_then_a_pack_lost(
    env: &Env,
    prefix: &str,
    src: &std::path::Path,
) -> (Repository<kura_repo::S3Storage>, Id) {
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.into()]), opts())
        .await
        .unwrap();
    let first = first_blob_of_a(&repo, &snap).await;
    let pack = repo.index().get(&first).unwrap().pack;
    repo.storage()
        .delete(FileType::Pack, &pack.to_hex())
        .await
        .unwrap();
    (repo, pack)
}

/// After a pack is lost, the snapshots that used it keep prune from running (it refuses,
/// above); `repair snapshots --forget` replaces them with snapshots that keep every file
/// that is still whole, zeros in place of a lost run, and prune runs again.
#[tokio::test(flavor = "multi_thread")]
async fn repair_snapshots_keeps_what_is_whole_zeros_a_lost_run_and_lets_prune_run() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let a = pseudo_random(2_500_000, 61);
    let b = pseudo_random(200_000, 62);
    std::fs::write(src.path().join("a.bin"), &a).unwrap();
    std::fs::write(src.path().join("b.bin"), &b).unwrap();
    let (mut repo, pack) = backed_up_then_a_pack_lost(&env, "lostpack", src.path()).await;
    let got = prune(&mut repo, Duration::ZERO).await;
    assert!(
        got.is_ok(),
        "the pack is still indexed: prune does not refuse yet"
    );
    let report = kura_repo::repair_index(&mut repo, false).await.unwrap();
    assert_eq!(report.missing, vec![pack], "{report:?}");
    assert!(matches!(
        prune(&mut repo, Duration::ZERO).await,
        Err(RepoError::Unindexed { .. })
    ));

    let report = kura_repo::repair_snapshots(&mut repo, true).await.unwrap();
    assert_eq!(
        (report.repaired.len(), report.forgotten),
        (1, 1),
        "{report:?}"
    );
    assert!(
        report
            .lost
            .iter()
            .any(|l| l.contains("a.bin") && l.contains("zeros")),
        "{report:?}"
    );
    let snaps = repo.snapshots().await.unwrap();
    assert_eq!(snaps.len(), 1);
    let (_, repaired) = &snaps[0];
    assert!(
        repaired.tags.iter().any(|t| t == "repaired"),
        "{repaired:?}"
    );
    for _ in 0..2 {
        prune(&mut repo, Duration::ZERO).await.unwrap();
    }
    let report = check(&mut repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");

    let out = tempfile::tempdir().unwrap();
    kura_repo::restore(
        &repo,
        &repaired.tree,
        out.path(),
        &kura_repo::Include::all(),
    )
    .await
    .unwrap();
    let dir = out.path().join(src.path().file_name().unwrap());
    assert_eq!(std::fs::read(dir.join("b.bin")).unwrap(), b);
    let got = std::fs::read(dir.join("a.bin")).unwrap();
    assert_eq!(got.len(), a.len(), "a lost run keeps the file's size");
    assert!(
        got[..16 << 10].iter().all(|&x| x == 0),
        "zeros where it was lost"
    );
    assert!(got.iter().zip(&a).all(|(g, o)| g == o || *g == 0));
    assert_eq!(got[a.len() - 100_000..], a[a.len() - 100_000..]);
}

/// Flips one byte in the middle of a stored object's ciphertext.
fn damage(file: &std::path::Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(file, bytes).unwrap();
}

/// Before: `repair snapshots` paused after it stored its new trees, and before it indexed
/// them, past its lease's lifetime. Two prunes took the lease in turn and deleted the
/// trees' pack (unindexed, so unused); the repair then went on, wrote an index object
/// naming the deleted pack, and a repaired snapshot whose trees were gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_repair_paused_past_its_lease_writes_nothing_that_names_deleted_trees() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(2_500_000, 63)).unwrap();
    let (mut repo, _) = backed_up_then_a_pack_lost(&env, "pausedrepair", src.path()).await;

    let gate = Gate::new(vec![FileType::Index], None);
    let storage = Hooked {
        inner: env.storage("pausedrepair"),
        hook: gate.clone(),
    };
    let mut repairer = Repository::open(storage).await.unwrap();
    let running =
        tokio::spawn(async move { kura_repo::repair_snapshots(&mut repairer, false).await });
    gate.reached.notified().await;

    // Its lease goes stale (its lifetime shortened to one second, rather than waiting five
    // minutes); two prunes run, the shortest grace allowed.
    crate::lease::lease_made_stale(&env, "pausedrepair").await;
    let first_prune = prune(&mut repo, Duration::ZERO).await.unwrap();
    assert!(first_prune.marked > 0, "{first_prune:?}");
    let second_prune = prune(&mut repo, Duration::ZERO).await.unwrap();
    assert!(second_prune.deleted > 0, "{second_prune:?}");

    gate.open.send_replace(true);
    let outcome = running.await.unwrap();
    assert!(matches!(outcome, Err(RepoError::LeaseLost)), "{outcome:?}");
    let mut reader = Repository::open(env.storage("pausedrepair")).await.unwrap();
    assert_eq!(
        reader.snapshots().await.unwrap().len(),
        1,
        "the original only"
    );
    // The repair, run again as the lost pack asks, ends clean.
    kura_repo::repair_index(&mut reader, false).await.unwrap();
    let report = kura_repo::repair_snapshots(&mut reader, true)
        .await
        .unwrap();
    assert_eq!(report.repaired.len(), 1, "{report:?}");
    let report = check(&mut reader, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

/// A repository at `prefix` with two snapshots: the first of `src` holding `a.bin` alone,
/// the second after `0.bin` was added (so `a.bin`'s chunks fall in other packs), taken
/// while the first's index objects and snapshot were set aside (put back after: as two
/// backups running at once store the same new data). Every blob of the first is in two
/// packs; the pack the loaded index reads `a.bin`'s first chunk from is then deleted.
/// Returns the first snapshot.
async fn a_stored_twice_then_one_copy_lost(
    env: &Env,
    prefix: &str,
    src: &std::path::Path,
) -> (Id, kura_repo::Snapshot) {
    let storage = env.storage(prefix);
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    let (first, snap) = backup(&mut repo, Source::Paths(vec![src.into()]), opts())
        .await
        .unwrap();
    let mut set_aside = vec![(
        FileType::Snapshot,
        first.to_hex(),
        storage
            .get(FileType::Snapshot, &first.to_hex())
            .await
            .unwrap(),
    )];
    let names = index_names(env, prefix).await;
    for name in &names {
        let bytes = storage.get(FileType::Index, name).await.unwrap();
        set_aside.push((FileType::Index, name.clone(), bytes));
    }
    forget_and_lose_index(&storage, first, &names).await;
    std::fs::write(src.join("0.bin"), pseudo_random(100_000, 73)).unwrap();
    let mut repo = Repository::open(env.storage(prefix)).await.unwrap();
    backup(&mut repo, Source::Paths(vec![src.into()]), opts())
        .await
        .unwrap();
    for (kind, name, bytes) in set_aside {
        storage.put(kind, &name, bytes).await.unwrap();
    }
    let repo = Repository::open(env.storage(prefix)).await.unwrap();
    let read_from = repo
        .index()
        .get(&first_blob_of_a(&repo, &snap).await)
        .unwrap()
        .pack;
    storage
        .delete(FileType::Pack, &read_from.to_hex())
        .await
        .unwrap();
    (first, snap)
}

/// Before: a blob stored in two packs was judged by the one the loaded index kept. With
/// that pack lost, `repair snapshots --forget` put zeros in place of data the other pack
/// still held and deleted the original snapshot, and `check` named the file as lost. A
/// blob is lost only when no index object places it in a stored pack (FORMAT.md 9.4).
/// (`0.bin` may be lost for real: it shares its one pack with `a.bin`'s start.)
#[tokio::test(flavor = "multi_thread")]
async fn a_blob_with_a_stored_copy_is_not_taken_for_lost_by_repair_or_check() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let a = pseudo_random(2_500_000, 71);
    std::fs::write(src.path().join("a.bin"), &a).unwrap();
    let (first, snap) = a_stored_twice_then_one_copy_lost(&env, "twice", src.path()).await;

    let mut repo = Repository::open(env.storage("twice")).await.unwrap();
    let checked = check(&mut repo, false).await.unwrap();
    assert!(
        !checked.affected.iter().any(|f| f.contains("a.bin")),
        "{checked:?}"
    );
    assert_eq!(checked.damaged_packs.len(), 1, "the lost copy: {checked:?}");

    let report = kura_repo::repair_snapshots(&mut repo, true).await.unwrap();
    assert!(
        !report.lost.iter().any(|l| l.contains("a.bin")),
        "{report:?}"
    );
    assert!(
        !report.repaired.iter().any(|(old, _)| *old == first),
        "{report:?}"
    );
    assert!(report.read_elsewhere > 0, "{report:?}");

    kura_repo::repair_index(&mut repo, false).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    kura_repo::restore(&repo, &snap.tree, out.path(), &kura_repo::Include::all())
        .await
        .unwrap();
    let dir = out.path().join(src.path().file_name().unwrap());
    assert_eq!(std::fs::read(dir.join("a.bin")).unwrap(), a);
}

//! `kura repair index` and `kura repair snapshots` as processes, on a repository damaged
//! the way an operator might find it: an index object or a pack deleted from the upstream
//! underneath the gateway. Their exit codes and what they print, and what follows: a
//! clean `check --read-data`, prune running again, and restores (whole, or with zeros
//! where a lost run of chunks was, as repo/README.md says). The library's side of the same
//! repairs is repo/tests/it/integrity.rs.

use std::collections::BTreeMap;

use kura_testkit::data::pseudo_random;

use crate::faulty_repo::{Repo, files};

/// Small chunks and packs, so that a few MB make several packs; no grace, so that prune
/// deletes at its second run.
const INIT: &[&str] = &["--chunk-kib", "64", "--pack-mib", "1", "--grace", "0s"];

/// A repository with one snapshot of a directory of two incompressible files and a small
/// text; the directory and the snapshot's ID.
fn backed_up() -> (Repo, tempfile::TempDir, String) {
    let repo = Repo::init(INIT);
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.bin"), pseudo_random(2_500_000, 61)).unwrap();
    std::fs::write(src.path().join("b.bin"), pseudo_random(200_000, 62)).unwrap();
    std::fs::write(src.path().join("notes.txt"), "replicas: 3\n".repeat(500)).unwrap();
    repo.ok(&["backup", src.path().to_str().unwrap()]);
    let id = repo.snapshots().pop().unwrap();
    (repo, src, id)
}

fn name(src: &tempfile::TempDir) -> String {
    src.path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The largest data pack: one that holds data (trees are packed apart and small).
fn largest_pack(repo: &Repo) -> String {
    repo.objects("data")
        .into_iter()
        .max_by_key(|p| {
            std::fs::metadata(repo.object_path("data", p))
                .unwrap()
                .len()
        })
        .unwrap()
}

/// Prune, twice (mark, delete), and a third run that finds nothing unused.
fn prune_settles(repo: &Repo) {
    repo.ok(&["prune"]);
    repo.ok(&["prune"]);
    let last = repo.ok(&["prune"]);
    assert!(
        last.starts_with("marked 0 unused packs; deleted 0 packs"),
        "{last}"
    );
}

/// An index object deleted by hand: prune refuses, `repair index` indexes the packs again
/// from their headers, and nothing was lost.
#[test]
fn repair_index_rebuilds_a_deleted_index_object_and_every_snapshot_restores_whole() {
    let (repo, src, first) = backed_up();
    let mut expected = BTreeMap::from([(first.clone(), files(src.path()))]);
    std::fs::write(src.path().join("c.bin"), pseudo_random(1_500_000, 63)).unwrap();
    repo.ok(&["backup", src.path().to_str().unwrap()]);
    let second = repo.snapshots().pop().unwrap();
    expected.insert(second, files(src.path()));
    // The first backup's index object, which lists most of what both snapshots use.
    let mut indexes = repo.objects("index");
    assert_eq!(indexes.len(), 2, "{indexes:?}");
    indexes.sort_by_key(|n| {
        std::fs::metadata(repo.object_path("index", n))
            .unwrap()
            .modified()
            .unwrap()
    });
    std::fs::remove_file(repo.object_path("index", &indexes[0])).unwrap();

    let refused = repo.kura(&["prune"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("prune refuses to run: `kura repair index` rebuilds"),
        "{}",
        stderr(&refused)
    );
    let check = repo.kura(&["check"]);
    assert!(!check.status.success(), "check sees the unindexed blobs");

    let out = repo.kura(&["repair", "index"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let packs = repo.objects("data").len();
    // Every stored pack; those the lost object listed read from their headers (the
    // other object's entries are trusted), and all of them new to the index.
    let counts = said
        .strip_prefix(&format!("indexed {packs} packs ("))
        .and_then(|r| r.split_once(" not indexed before"))
        .and_then(|(r, _)| r.split_once(" read, "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(counts.0 == counts.1 && counts.0 != "0", "{said}");
    assert!(
        said.trim_end().ends_with("removed 1 old index objects"),
        "{said}"
    );
    assert!(
        stderr(&out).is_empty(),
        "nothing left out: {}",
        stderr(&out)
    );

    repo.check_clean();
    prune_settles(&repo);
    repo.check_clean();
    for (id, want) in &expected {
        assert!(
            repo.restored(id, &name(&src)) == *want,
            "{id} restores whole"
        );
    }
}

/// A data pack deleted by hand: `check --read-data` names what it affects, `repair index
/// --read-data` leaves it out, `repair snapshots --forget` replaces the snapshot with one
/// tagged `repaired` whose files keep their size (zeros where the lost run was), prune
/// runs again, and the next backup stores the lost data again.
#[test]
fn a_lost_pack_is_left_out_by_repair_index_and_repair_snapshots_keeps_the_rest() {
    let (repo, src, original) = backed_up();
    let want = files(src.path());
    // The largest pack holds data (trees are packed apart and small).
    let pack = largest_pack(&repo);
    std::fs::remove_file(repo.object_path("data", &pack)).unwrap();

    let check = repo.kura(&["check", "--read-data"]);
    assert!(!check.status.success());
    let err = stderr(&check);
    assert!(
        err.contains("kura: affected:") && err.contains(".bin"),
        "{err}"
    );

    let out = repo.kura(&["repair", "index", "--read-data"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let packs = repo.objects("data").len();
    assert!(
        said.starts_with(&format!("indexed {packs} packs ({packs} read, ")),
        "{said}"
    );
    assert!(said.contains("the next backup stores again"), "{said}");
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "kura: pack {} is indexed but not stored: left out",
            &pack[..8]
        ),
    );
    assert_eq!(repo.objects("data").len(), packs, "it deletes no pack");

    let refused = repo.kura(&["prune"]);
    assert!(!refused.status.success(), "the snapshot names lost blobs");

    let out = repo.kura(&["repair", "snapshots", "--forget"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with(&format!("snapshot {} repaired as ", &original[..8])),
        "{said}"
    );
    assert!(
        said.contains("1 originals deleted; `kura prune` can run"),
        "{said}"
    );
    let losses = stderr(&out);
    assert!(
        losses.lines().all(|l| l.starts_with("kura: lost: ")) && losses.contains(".bin"),
        "{losses}"
    );

    let list = repo.ok(&["snapshots", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "the original is forgotten");
    let repaired = list[0]["id"].as_str().unwrap().to_owned();
    let snap = &list[0]["snapshot"];
    assert!(
        snap["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "repaired"),
        "{snap}"
    );
    let errors = snap["errors"].to_string();
    assert!(
        errors.contains(&format!("repaired from snapshot {original}")),
        "{errors}"
    );

    prune_settles(&repo);
    repo.check_clean();
    // Every file keeps its size; each byte is what was backed up or a zero of the lost
    // run; and something was lost.
    let got = repo.restored(&repaired, &name(&src));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    let mut zeroed = 0;
    for (path, bytes) in &got {
        let was = &want[path];
        assert_eq!(bytes.len(), was.len(), "{path} keeps its size");
        for (g, w) in bytes.iter().zip(was) {
            assert!(g == w || *g == 0, "{path}: a byte that is neither");
            zeroed += usize::from(g != w);
        }
    }
    assert!(zeroed > 0, "the lost pack's bytes are zeros");

    // What is still on disk goes in again whole.
    repo.ok(&["backup", src.path().to_str().unwrap()]);
    let newest = repo.snapshots().pop().unwrap();
    assert!(repo.restored(&newest, &name(&src)) == want);
    repo.check_clean();
}

/// Found by review (2026-12-08): `restore NEW TARGET --only-changed-since OLD` onto a
/// standby that holds OLD wrote the blocks in which the snapshots differ; where NEW was
/// repaired, the blocks it lost are holes, so the standby's copy of them, which may be the
/// only one left, was zeroed. An incomplete or repaired snapshot is refused for it.
#[test]
fn an_incremental_restore_of_a_repaired_image_is_refused_and_the_target_left_alone() {
    let repo = Repo::init(&[INIT, &["--block-kib", "64"]].concat());
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let mon = pseudo_random(3 << 20, 71);
    let mut tue = mon.clone();
    tue[..64 << 10].copy_from_slice(&pseudo_random(64 << 10, 72));
    std::fs::write(p("mon.img"), &mon).unwrap();
    std::fs::write(p("tue.img"), &tue).unwrap();
    let block = ["backup", "--block", "--source-id", "vg0/vol"];
    repo.ok(&[&block[..], &[p("mon.img").as_str()]].concat());
    repo.ok(&[&block[..], &[p("tue.img").as_str()]].concat());
    let mon_id = repo.snapshots()[0].clone();
    // Tuesday's image keeps most of Monday's blocks: a lost pack is lost to both.
    let pack = largest_pack(&repo);
    std::fs::remove_file(repo.object_path("data", &pack)).unwrap();
    repo.ok(&["repair", "index"]);
    // Without --forget: Monday's original stays, with blobs where the repaired Tuesday
    // has holes.
    let _ = repo.kura(&["repair", "snapshots"]);
    let list = repo.ok(&["snapshots", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let repaired: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            let snap = &s["snapshot"];
            snap["tags"]
                .as_array()
                .is_some_and(|t| t.contains(&"repaired".into()))
                && snap["paths"][0].as_str().unwrap().ends_with("tue.img")
        })
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let [tue_id] = repaired.as_slice() else {
        panic!("Tuesday's snapshot repaired: {list}");
    };

    std::fs::write(p("standby.img"), &mon).unwrap();
    let out = repo.kura(&[
        "restore",
        tue_id,
        &p("standby.img"),
        "--only-changed-since",
        &mon_id,
    ]);
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("repaired"), "{}", stderr(&out));
    assert!(
        std::fs::read(p("standby.img")).unwrap() == mon,
        "the standby keeps Monday's image"
    );
}

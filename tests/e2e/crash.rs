//! The crash matrix (issue 22): `kura backup`, `prune` and `forget` killed with SIGKILL
//! right after each kind of write they make, by the upstream that carried the write out
//! (testkit's `KillOnStore`), so the object is stored and the process never hears so.
//! After every kill the repository must check clean with `--read-data`, the next backup
//! must succeed and restore byte for byte, and the next prunes must delete exactly what no
//! snapshot uses: afterwards nothing unused is left and every snapshot restores. A
//! `kura restore` killed while it waits on a read must leave its marker, and the next
//! whole restore exactly the snapshot's files.
//!
//! The write order they rely on is FORMAT.md's: a backup stores packs, then the index that
//! names them, then its snapshot; a prune writes a mark, and past the grace period writes
//! the shrunk index object, deletes the old one, deletes the packs, then the mark.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kura_testkit::data::pseudo_random;
use kura_testkit::fault::Op;

use crate::faulty_repo::{Repo, files};

/// Small chunks and packs, so that a few MB make several packs; no grace, and the shortest
/// session timeout, so that a prune can act on a mark and on a killed backup's session
/// within a test.
const INIT: &[&str] = &[
    "--chunk-kib",
    "64",
    "--pack-mib",
    "1",
    "--grace",
    "0s",
    "--session-timeout",
    "2s",
];

/// How long after a kill the killed backup's session is stale for certain: the timeout
/// (2 s) past its last refresh, in the whole seconds of Last-Modified.
const SESSION_STALE: Duration = Duration::from_millis(3_500);

/// A repository, the directory backed up into it, and what each snapshot must restore.
struct Scene {
    repo: Repo,
    src: tempfile::TempDir,
    expected: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

impl Scene {
    /// A repository holding one snapshot of `names`, each a 1.5 MB incompressible file.
    fn new(names: &[&str]) -> Scene {
        let repo = Repo::init(INIT);
        let src = tempfile::tempdir().unwrap();
        for (seed, name) in (1..).zip(names) {
            std::fs::write(src.path().join(name), pseudo_random(1_500_000, seed)).unwrap();
        }
        std::fs::write(src.path().join("notes.txt"), "replicas: 3\n".repeat(500)).unwrap();
        let mut scene = Scene {
            repo,
            src,
            expected: BTreeMap::new(),
        };
        scene.backup();
        scene
    }

    fn path(&self) -> &str {
        self.src.path().to_str().unwrap()
    }

    /// The name the backed-up directory has in a snapshot.
    fn name(&self) -> String {
        self.src
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// A new file and one changed, so that the next backup stores something.
    fn change(&self, seed: u64) {
        std::fs::write(
            self.src.path().join(format!("new-{seed}.bin")),
            pseudo_random(1_500_000, seed),
        )
        .unwrap();
        std::fs::write(
            self.src.path().join("notes.txt"),
            format!("replicas: {seed}\n").repeat(500),
        )
        .unwrap();
    }

    /// Backs the directory up; records what the new snapshot must restore.
    fn backup(&mut self) {
        let before = self.repo.snapshots();
        self.repo.ok(&["backup", self.path()]);
        let new = self.new_snapshots(&before);
        assert_eq!(new.len(), 1, "one new snapshot");
        self.expected.insert(new[0].clone(), files(self.src.path()));
    }

    fn new_snapshots(&self, before: &[String]) -> Vec<String> {
        self.repo
            .snapshots()
            .into_iter()
            .filter(|s| !before.contains(s))
            .collect()
    }

    /// What every kill must leave: a clean check; a next backup that succeeds; prunes
    /// that delete what is unused, until a last one finds nothing to mark or delete; and
    /// every snapshot restoring what was backed up. `session_dies` is when a killed
    /// backup's session was last refreshed: a prune waits for it to go stale before it
    /// deletes a mark made after it started.
    fn recovers(mut self, session_dies: Option<Instant>) {
        self.repo.check_clean();
        self.change(99);
        self.backup();
        if let Some(killed) = session_dies {
            std::thread::sleep(SESSION_STALE.saturating_sub(killed.elapsed()));
        }
        // The first marks, the second deletes what the first marked (and a killed prune's
        // mark, if any); the third must find nothing more.
        self.repo.ok(&["prune"]);
        self.repo.ok(&["prune"]);
        let last = self.repo.ok(&["prune"]);
        assert!(
            last.starts_with("marked 0 unused packs; deleted 0 packs"),
            "nothing unused is left, nothing waits: {last}"
        );
        assert!(!last.contains("wait"), "{last}");
        self.repo.check_clean();
        let mut listed = self.repo.snapshots();
        listed.sort();
        assert_eq!(
            listed,
            self.expected.keys().cloned().collect::<Vec<_>>(),
            "no snapshot lost, none added"
        );
        let name = self.name();
        for (id, want) in &self.expected {
            assert!(
                self.repo.restored(id, &name) == *want,
                "snapshot {id} restores what was backed up"
            );
        }
    }

    /// `kura prune` refuses while the killed run's lease is live, then (its five minutes
    /// made to pass) takes it over.
    fn outlive_lease(&self) {
        let busy = self.repo.kura(&["prune"]);
        assert!(
            !busy.status.success(),
            "a dead run's lease is live for a while"
        );
        let err = String::from_utf8_lossy(&busy.stderr);
        assert!(err.contains("the repository is busy"), "{err}");
        self.repo.age("lease", Duration::from_mins(10));
    }
}

/// A second backup (one file new, one changed) killed right after the first object it
/// stores under `kind/`.
fn backup_killed_after(kind: &str) {
    let mut scene = Scene::new(&["a.bin", "b.bin"]);
    scene.change(7);
    let before = scene.repo.snapshots();
    scene
        .repo
        .killed_after(Op::Put, kind, 1, &["backup", scene.path()]);
    let killed = Instant::now();
    let new = scene.new_snapshots(&before);
    if kind == "snapshots" {
        // Stored whole before the kill: it is a snapshot like any other.
        assert_eq!(new.len(), 1, "{new:?}");
        scene
            .expected
            .insert(new[0].clone(), files(scene.src.path()));
    } else {
        assert!(new.is_empty(), "no snapshot without its index: {new:?}");
    }
    scene.recovers(Some(killed));
}

#[test]
fn a_backup_killed_after_its_first_pack_was_written_leaves_a_clean_repository() {
    backup_killed_after("data");
}

#[test]
fn a_backup_killed_after_its_index_was_written_leaves_a_clean_repository() {
    backup_killed_after("index");
}

#[test]
fn a_backup_killed_after_its_snapshot_was_written_leaves_a_clean_repository() {
    backup_killed_after("snapshots");
}

/// `kura restore` killed while it waits on a GET of its data, with its large files under
/// temporary names: the target keeps the marker, and the next whole restore of the same
/// snapshot leaves exactly the snapshot's files, with no marker and no temporary file.
#[test]
fn a_restore_killed_part_way_is_made_good_by_the_next_whole_restore() {
    let scene = Scene::new(&["a.bin", "b.bin"]);
    let dst = tempfile::tempdir().unwrap();
    let target = dst.path().to_str().unwrap();
    // The first GETs under data/ read trees; by the fourth, a file is being written under a
    // temporary name (asserted below).
    scene
        .repo
        .killed_after(Op::Get, "data", 4, &["restore", "latest", target]);
    let marker = dst.path().join(".kura-restore-unfinished");
    assert!(marker.is_file(), "a killed restore leaves its marker");
    let left = kura_testkit::walk::files_under(dst.path());
    assert!(
        left.iter().any(|f| f
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".kura-restore-")
            && f != &marker),
        "a file was being written under a temporary name: {left:?}"
    );

    let out = scene.repo.kura(&["restore", "latest", target]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!marker.exists(), "{stderr}");
    let (_, want) = scene.expected.iter().next().unwrap();
    let got = files(&dst.path().join(scene.name()));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "the snapshot's files and nothing else"
    );
    assert!(got == *want, "the snapshot's files, whole");
}

/// Two snapshots, the first forgotten: its two files' packs (at least two holding
/// nothing else) are unused; `marked` says whether a prune has marked them already.
fn garbage(marked: bool) -> Scene {
    let mut scene = Scene::new(&["drop-1.bin", "drop-2.bin", "keep.bin"]);
    for name in ["drop-1.bin", "drop-2.bin"] {
        std::fs::remove_file(scene.src.path().join(name)).unwrap();
    }
    scene.backup();
    let out = scene.repo.ok(&["forget", "--keep-last", "1"]);
    assert!(out.contains("removed 1"), "{out}");
    let listed = scene.repo.snapshots();
    scene.expected.retain(|id, _| listed.contains(id));
    if marked {
        let out = scene.repo.ok(&["prune"]);
        let n: u32 = out
            .strip_prefix("marked ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        assert!(n >= 2, "packs to delete one by one: {out}");
    }
    scene
}

/// A prune killed right after its `nth` `op` under `kind/`.
fn prune_killed_after(marked: bool, op: Op, kind: &str, nth: u32) {
    let scene = garbage(marked);
    scene.repo.killed_after(op, kind, nth, &["prune"]);
    scene.outlive_lease();
    scene.recovers(None);
}

#[test]
fn a_prune_killed_after_its_mark_was_written_leaves_a_clean_repository() {
    prune_killed_after(false, Op::Put, "prune", 1);
}

/// The shrunk index object is stored; the old one, naming the doomed packs, too.
#[test]
fn a_prune_killed_after_it_wrote_the_shrunk_index_leaves_a_clean_repository() {
    prune_killed_after(true, Op::Put, "index", 1);
}

/// The doomed packs are stored, marked, and in no index object.
#[test]
fn a_prune_killed_after_it_deleted_the_old_index_leaves_a_clean_repository() {
    prune_killed_after(true, Op::Delete, "index", 1);
}

#[test]
fn a_prune_killed_after_deleting_one_of_its_packs_leaves_a_clean_repository() {
    prune_killed_after(true, Op::Delete, "data", 1);
}

/// Its packs are all gone; only the lease is left.
#[test]
fn a_prune_killed_after_its_mark_was_deleted_leaves_a_clean_repository() {
    prune_killed_after(true, Op::Delete, "prune", 1);
}

/// `forget --keep-last 1` over three snapshots, killed after deleting the first of two.
#[test]
fn a_forget_killed_between_two_deletes_leaves_a_clean_repository() {
    let mut scene = Scene::new(&["a.bin"]);
    for seed in [11, 12] {
        scene.change(seed);
        scene.backup();
    }
    let newest = scene.repo.snapshots().pop().unwrap();
    let key = scene
        .repo
        .killed_after(Op::Delete, "snapshots", 1, &["forget", "--keep-last", "1"]);
    let gone: Vec<String> = scene
        .expected
        .keys()
        .filter(|id| key.ends_with(id.as_str()))
        .cloned()
        .collect();
    assert_eq!(gone.len(), 1, "{key}");
    scene.expected.remove(&gone[0]);
    assert_eq!(scene.repo.snapshots().len(), 2);
    scene.outlive_lease();
    let out = scene.repo.ok(&["forget", "--keep-last", "1"]);
    assert!(out.contains("kept 1 snapshots, removed 1"), "{out}");
    scene.expected.retain(|id, _| *id == newest);
    scene.recovers(None);
}

//! Files that change while a backup reads them (stored torn before, without a word), and
//! files changed too close to a backup's start for their timestamps to tell ("racy
//! clean"): what the snapshot records and what the next backup reads again.
//!
//! A file is changed mid-read deterministically by a storage hook: with packs of 64 KiB
//! and at most `UPLOADS_IN_FLIGHT` (4) uploads at once, the walk cannot read more than a
//! few hundred KiB of new data past a pack's upload before that upload has finished, and
//! the hook rewrites the source file before it lets the upload through. So a file of
//! 2 MiB is changed while it is being read, never only before or after.
//!
//! The new fields are read from the snapshot's and the tree's JSON, as FORMAT.md names
//! them (and so that these tests compiled, and failed, before the fields existed).

use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, SystemTime};

use kura_repo::{
    ChunkerSizes, FileType, Node, Params, Repository, Snapshot, Source, Storage, backup,
};

use crate::backup_restore::opts;
use crate::harness::{Env, Hook, Hooked, Op, pseudo_random, settle};

/// Packs of 64 KiB (chunks of 4..64 KiB), so that a 2 MiB file fills many of them.
fn tiny_packs() -> Params {
    Params {
        chunker: ChunkerSizes {
            min: 4 << 10,
            avg: 16 << 10,
            max: 64 << 10,
        },
        pack_size: 64 << 10,
        ..crate::backup_restore::small_params()
    }
}

/// Overwrites the start of `path` before each of the next `times` pack uploads: with
/// `same` set, always with the bytes `first` (the file changes once: its second read sees
/// the same bytes again); otherwise with bytes never written before.
struct Rewriter {
    path: PathBuf,
    first: Vec<u8>,
    same: bool,
    times: AtomicU64,
    done: AtomicU64,
}

impl Rewriter {
    fn new(path: &Path, first: Vec<u8>, same: bool, times: u64) -> Arc<Self> {
        Arc::new(Self {
            path: path.to_path_buf(),
            first,
            same,
            times: AtomicU64::new(times),
            done: AtomicU64::new(0),
        })
    }
}

impl Hook for Arc<Rewriter> {
    async fn before(&self, op: Op, ft: FileType, _name: &str) -> kura_repo::Result<()> {
        if op != Op::Put || ft != FileType::Pack {
            return Ok(());
        }
        if self
            .times
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return Ok(());
        }
        let n = self.done.fetch_add(1, SeqCst);
        let bytes = if self.same || n == 0 {
            self.first.clone()
        } else {
            pseudo_random(self.first.len(), 1000 + n)
        };
        // In place, as a database or an editor saving over the file does: same inode.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .unwrap();
        file.write_all_at(&bytes, 0).unwrap();
        Ok(())
    }
}

/// Writes `bytes` to `path` with its mtime an hour back, so that any write during the
/// backup moves the mtime, however coarse the file system's clock.
fn write_old(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_hours(1))
        .unwrap();
}

/// The node of `name` in the directory `dir` at the top of `snap`.
async fn node_of<S: Storage>(
    repo: &Repository<S>,
    snap: &Snapshot,
    dir: &Path,
    name: &str,
) -> Node {
    let root = repo.read_tree(&snap.tree).await.unwrap();
    let top = root
        .find(dir.file_name().unwrap())
        .expect("the source directory");
    let tree = repo.read_tree(&top.subtree.unwrap()).await.unwrap();
    tree.find(std::ffi::OsStr::new(name))
        .expect("the file is in the snapshot")
        .clone()
}

/// The content a file node stores.
async fn content_of<S: Storage>(repo: &Repository<S>, node: &Node) -> Vec<u8> {
    let mut out = Vec::new();
    kura_repo::write_content(repo, node, &mut out)
        .await
        .unwrap();
    out
}

/// A JSON field of a value, `null` when it is not there.
fn field(value: &impl serde::Serialize, pointer: &str) -> serde_json::Value {
    serde_json::to_value(value)
        .unwrap()
        .pointer(pointer)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// Before: the file was stored as its old first part and its new rest, a version that
/// never existed, and nothing said so.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_rewritten_once_while_it_is_read_is_read_again_and_stored_as_its_new_version() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let db = src.path().join("db");
    let (old, new) = (pseudo_random(2 << 20, 1), pseudo_random(2 << 20, 2));
    write_old(&db, &old);
    let hook = Rewriter::new(&db, new.clone(), true, 1);
    let storage = Hooked {
        inner: env.storage("torn-once"),
        hook: hook.clone(),
    };
    let mut repo = Repository::init(storage, tiny_packs()).await.unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert_eq!(
        hook.done.load(SeqCst),
        1,
        "the file was rewritten during the backup"
    );

    let node = node_of(&repo, &snap, src.path(), "db").await;
    let stored = content_of(&repo, &node).await;
    assert!(
        stored == new,
        "the stored content is the file's new version, whole; it is {} bytes, the old \
         version: {}, starting as the old version: {}",
        stored.len(),
        stored == old,
        stored[..4096] == old[..4096]
    );
    assert_eq!(
        field(&node, "/changed_during_backup"),
        serde_json::Value::Null,
        "a file read whole at its second reading is not flagged"
    );
    assert_eq!(
        node.mtime,
        i128::try_from(
            std::fs::metadata(&db)
                .unwrap()
                .modified()
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )
        .unwrap(),
        "the node's metadata is the version read"
    );
    assert!(!snap.incomplete);
}

/// Before: stored torn, with no flag, no count and no warning.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_keeps_changing_while_it_is_read_is_flagged_in_its_node_and_the_summary() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let db = src.path().join("db");
    write_old(&db, &pseudo_random(2 << 20, 3));
    write_old(&src.path().join("calm"), &pseudo_random(100_000, 4));
    // 1 MiB of never-seen bytes at each upload: every reading of the file has new data
    // enough to upload packs, and so sees the file change again.
    let hook = Rewriter::new(&db, pseudo_random(1 << 20, 5), false, 10_000);
    let storage = Hooked {
        inner: env.storage("torn-always"),
        hook: hook.clone(),
    };
    let mut repo = Repository::init(storage, tiny_packs()).await.unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    hook.times.store(0, SeqCst);

    let node = node_of(&repo, &snap, src.path(), "db").await;
    assert_eq!(
        field(&node, "/changed_during_backup"),
        serde_json::Value::Bool(true),
        "the node says its content may be torn"
    );
    let calm = node_of(&repo, &snap, src.path(), "calm").await;
    assert_eq!(
        field(&calm, "/changed_during_backup"),
        serde_json::Value::Null
    );
    assert_eq!(
        field(&snap, "/summary/files_changed_during_backup"),
        serde_json::json!(1),
        "the summary counts it"
    );
    let listed = field(&snap, "/changed_during_backup");
    assert_eq!(
        listed,
        serde_json::json!([db.display().to_string()]),
        "the snapshot names it"
    );
    assert!(
        !snap.incomplete,
        "what was read is kept; the snapshot is not incomplete (restic, tar, borg alike)"
    );
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    assert_eq!(
        snap.summary.bytes_read,
        2 * (2 << 20) + 100_000,
        "the changing file was read twice (its second reading saw a change too), no more"
    );
}

/// Before: the second backup trusted the file, whose size, mtime, ctime and inode matched
/// the parent's record, though they were taken within the file system's timestamp
/// granularity of the first backup's start: a write in that same tick would not have
/// moved them, and the change would never be read.
///
/// A write that leaves size, mtime and ctime as they were cannot be made from user space
/// (a ctime cannot be set), so this test shows the rule instead: the file is read again,
/// while a file older than the margin is not.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_changed_just_before_a_backup_started_is_read_again_by_the_next_one() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("settled"), pseudo_random(300_000, 6)).unwrap();
    settle();
    std::fs::write(src.path().join("fresh"), pseudo_random(200_000, 7)).unwrap();
    let mut repo = Repository::init(env.storage("racy"), crate::backup_restore::small_params())
        .await
        .unwrap();
    let (first, _) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    let mut o = opts();
    o.parent = Some(first);
    let (_, second) = backup(&mut repo, Source::Paths(vec![src.path().into()]), o)
        .await
        .unwrap();
    assert_eq!(second.summary.files, 2);
    assert_eq!(
        second.summary.files_unchanged, 1,
        "only the settled file is taken from the parent"
    );
    assert_eq!(
        second.summary.bytes_read, 200_000,
        "the fresh file is read again"
    );

    // Once a backup started well after the change, the file is trusted.
    settle();
    let (third_parent, _) = {
        let mut o = opts();
        o.parent = Some(first);
        backup(&mut repo, Source::Paths(vec![src.path().into()]), o)
            .await
            .unwrap()
    };
    let mut o = opts();
    o.parent = Some(third_parent);
    let (_, fourth) = backup(&mut repo, Source::Paths(vec![src.path().into()]), o)
        .await
        .unwrap();
    assert_eq!(fourth.summary.files_unchanged, 2);
    assert_eq!(fourth.summary.bytes_read, 0);
}

/// A re-run takes an unchanged file's xattrs from its parent's node instead of listing
/// them again (setting or removing one moves the file's ctime), but only from a parent
/// that recorded every file's: one whose read of them failed, or that was written before
/// they were recorded, would pass its lack on as the truth.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_run_takes_unchanged_files_xattrs_from_a_parent_only_when_it_recorded_them_all() {
    use std::os::unix::ffi::OsStrExt as _;
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let (good, bad) = (src.path().join("good"), src.path().join("bad"));
    std::fs::write(&good, b"g").unwrap();
    std::fs::write(&bad, b"b").unwrap();
    crate::backup_restore::set_xattr(&good, "user.kura.a", b"1");
    crate::backup_restore::set_xattr(&bad, "user.kura.b", b"2");
    // A name that is not UTF-8 cannot be recorded (FORMAT.md 8.1): the read of `bad`'s
    // xattrs fails.
    let not_utf8 = std::ffi::OsStr::from_bytes(b"user.kura.\xff");
    rustix::fs::lsetxattr(&bad, not_utf8, b"3", rustix::fs::XattrFlags::empty()).unwrap();
    settle();
    let mut repo = Repository::init(
        env.storage("xattrs-again"),
        crate::backup_restore::small_params(),
    )
    .await
    .unwrap();
    let run = |parent| {
        let mut o = opts();
        o.parent = parent;
        o
    };
    let source = || Source::Paths(vec![src.path().into()]);
    let (first, one) = backup(&mut repo, source(), run(None)).await.unwrap();
    assert!(one.incomplete && !one.xattrs_recorded, "{:?}", one.errors);
    let (second, two) = backup(&mut repo, source(), run(Some(first))).await.unwrap();
    assert_eq!(
        two.summary.files_unchanged, 2,
        "both files are taken unread"
    );
    assert!(
        two.incomplete && two.errors.iter().any(|e| e.contains("bad")),
        "the parent's failed read is not taken for the truth: listed and failed again: {:?}",
        two.errors
    );
    assert!(!two.xattrs_recorded);

    rustix::fs::lremovexattr(&bad, not_utf8).unwrap();
    settle();
    let (third, three) = backup(&mut repo, source(), run(Some(second)))
        .await
        .unwrap();
    assert!(
        !three.incomplete && three.xattrs_recorded,
        "{:?}",
        three.errors
    );
    let (_, four) = backup(&mut repo, source(), run(Some(third))).await.unwrap();
    assert!(
        !four.incomplete && four.xattrs_recorded,
        "{:?}",
        four.errors
    );
    assert_eq!(four.summary.files_unchanged, 2);
    let root = repo.read_tree(&four.tree).await.unwrap();
    let listed = repo
        .read_tree(&root.nodes[0].subtree.unwrap())
        .await
        .unwrap();
    let xattrs = |name: &str| listed.find(name.as_ref()).unwrap().xattrs.clone();
    assert_eq!(
        xattrs("good"),
        Some(vec![("user.kura.a".into(), hex::encode(b"1"))])
    );
    assert_eq!(
        xattrs("bad"),
        Some(vec![("user.kura.b".into(), hex::encode(b"2"))])
    );
}

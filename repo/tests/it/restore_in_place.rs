//! Restoring into a directory that already holds files (issue 22 item 9): each file is
//! written under a temporary name in its directory and renamed over the old one, so a
//! hard link elsewhere keeps its own content, old extended attributes go with the old
//! inode, a FIFO planted at a file's name is replaced rather than opened, and a file
//! whose content fails keeps its old version. A restore stopped part-way leaves its
//! marker at the target's top (files that were being written under their own names may
//! be short), and the next restore there replaces every file and takes the marker away.

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
/// none is ever answered, as for a restore killed while it waits.
struct HangAfter {
    trees: std::collections::HashSet<String>,
    free: std::sync::atomic::AtomicUsize,
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
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_stopped_part_way_leaves_its_marker_which_only_a_whole_restore_after_it_takes_away()
 {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    for d in 0..3 {
        let dir = data.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..100 {
            // Below the chunker's minimum (one chunk each, so all written from runs), and
            // about 3 MiB in all: packs of 1 MiB, so several runs.
            let content = pseudo_random(6000 + (d * 100 + i) * 31 % 9000, (d * 100 + i) as u64);
            std::fs::write(dir.join(format!("f{i:02}")), content).unwrap();
        }
    }
    let mut repo = Repository::init(env.storage("stopped"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    let hook = Arc::new(HangAfter {
        trees: tree_packs(&repo, snap.tree).await,
        free: 1.into(),
    });
    let hanging = Repository::open(Hooked {
        inner: env.storage("stopped"),
        hook: hook.clone(),
    })
    .await
    .unwrap();
    let out = tempfile::tempdir().unwrap();

    // The first restore hangs on its GETs, still running, while a whole one ends beside
    // it: the marker stays, since the first one may be writing.
    let running = {
        let (tree, target) = (snap.tree, out.path().to_path_buf());
        tokio::spawn(async move { restore(&hanging, &tree, &target, &Include::all()).await })
    };
    let waited = tokio::time::timeout(Duration::from_secs(2), async {
        while hook.free.load(SeqCst) > 0 || !out.path().join(UNFINISHED).is_file() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the first restore made its marker and hung");
    let beside = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(beside.failed.is_empty(), "{:?}", beside.failed);
    assert!(
        out.path().join(UNFINISHED).is_file(),
        "a restore that ends while another one still runs leaves the marker to it"
    );
    running.abort();
    assert!(
        running.await.is_err(),
        "the restore was to wait on its GETs"
    );
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

    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
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

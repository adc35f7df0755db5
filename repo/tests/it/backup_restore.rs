//! init, backup (tree, stdin, block image), snapshots, restore, and what happens when
//! things are wrong.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use kura_repo::{
    BackupOptions, Content, Include, Node, Params, RepoError, Repository, Source, backup, restore,
};

use crate::harness::{Env, pseudo_random};

pub fn opts() -> BackupOptions {
    BackupOptions {
        host: "test-host".into(),
        tags: vec!["t".into()],
        parent: None,
        index_interval: None,
        block: kura_repo::BlockOptions::default(),
    }
}

/// Small chunks so that small test files still make several chunks and packs; no grace
/// period, so that tests may prune at once (sessions keep running backups safe).
pub fn small_params() -> Params {
    let mut p = Params::default();
    p.chunker.min = 16 << 10;
    p.chunker.avg = 64 << 10;
    p.chunker.max = 256 << 10;
    p.block_size = 64 << 10;
    p.pack_size = 1 << 20;
    p.grace = std::time::Duration::ZERO;
    p
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("a/b/c")).unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    std::fs::write(root.join("a/small.txt"), b"hello kura\n").unwrap();
    std::fs::write(root.join("a/b/random.bin"), pseudo_random(3 << 20, 1)).unwrap();
    std::fs::write(
        root.join("a/b/c/text.log"),
        "kura backup line\n".repeat(100_000),
    )
    .unwrap();
    std::fs::write(root.join("a/dup.bin"), pseudo_random(3 << 20, 1)).unwrap();
    std::os::unix::fs::symlink("b/random.bin", root.join("a/link")).unwrap();
    std::fs::hard_link(root.join("a/small.txt"), root.join("hard")).unwrap();
    std::fs::write(root.join("mode600"), b"secret-ish").unwrap();
    std::fs::set_permissions(root.join("mode600"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let odd = std::ffi::OsStr::new(std::str::from_utf8(b"caf\xc3\xa9").unwrap());
    std::fs::write(root.join(odd), b"utf-8 name").unwrap();
    let non_utf8: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(b"bad\xffname");
    std::fs::write(root.join(non_utf8), b"non-utf-8 name").unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(root.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());
    // A character device needs root: where the test runs without it, there is none to
    // back up, and the restore (by the same user) is not asked to make one.
    let _ = std::process::Command::new("mknod")
        .args([
            root.join("null-dev").as_os_str(),
            "c".as_ref(),
            "1".as_ref(),
            "3".as_ref(),
        ])
        .status();
    set_xattr(
        &root.join("a/small.txt"),
        "user.kura.test",
        b"\x00binary\xffvalue",
    );
    set_xattr(&root.join("a/b"), "user.kura.dir", b"on a directory");
    // 10,000 small files over 100 directories: the walk, tree blobs and index at a scale
    // where per-entry costs show.
    for d in 0..100 {
        let dir = root.join(format!("many/{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(
                dir.join(format!("{f:03}")),
                format!("file {d}/{f}\n").repeat(f),
            )
            .unwrap();
        }
    }
}

pub fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    rustix::fs::lsetxattr(path, name, value, rustix::fs::XattrFlags::empty()).unwrap();
}

/// Everything a restore must reproduce about one entry: kind, content or link target,
/// mode, owner, mtime, device number and extended attributes.
#[derive(Debug, PartialEq)]
pub struct Entry {
    pub rel: String,
    kind: &'static str,
    pub bytes: Vec<u8>,
    pub mode: u32,
    owner: (u32, u32),
    pub mtime: (i64, i64),
    rdev: u64,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Every entry under `root`, sorted by path.
pub fn listing(root: &Path) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let ft = meta.file_type();
            let (kind, bytes) = if ft.is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                ("symlink", t.as_os_str().as_encoded_bytes().to_vec())
            } else if ft.is_dir() {
                stack.push(p.clone());
                ("dir", Vec::new())
            } else if ft.is_file() {
                ("file", std::fs::read(&p).unwrap())
            } else if ft.is_fifo() {
                ("fifo", Vec::new())
            } else if ft.is_char_device() {
                ("chardev", Vec::new())
            } else {
                ("other", Vec::new())
            };
            out.push(Entry {
                rel: p.strip_prefix(root).unwrap().to_string_lossy().into_owned(),
                kind,
                bytes,
                // Linux symlinks are always 0777.
                mode: meta.mode() & 0o7777,
                owner: (meta.uid(), meta.gid()),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                rdev: meta.rdev(),
                xattrs: kura_repo::fsmeta::read_xattrs(p.as_path()).unwrap(),
            });
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

/// The node at `path` (`/`-separated, from the snapshot root).
async fn node_at(
    repo: &Repository<kura_repo::S3Storage>,
    root: &kura_repo::Id,
    path: &str,
) -> Node {
    let mut tree = repo.read_tree(root).await.unwrap();
    let mut parts = path.split('/').peekable();
    loop {
        let name = parts.next().unwrap();
        let node = tree.find(name.as_ref()).unwrap().clone();
        if parts.peek().is_none() {
            return node;
        }
        tree = repo
            .read_tree(node.subtree.as_ref().unwrap())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tree_with_every_file_type_comes_back_identical() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    make_tree(&data);
    let mut repo = Repository::init(env.storage("tree"), small_params())
        .await
        .unwrap();
    let (id, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    assert!(!snap.incomplete, "{:?}", snap.errors);
    assert_eq!(snap.host, "test-host");
    // random.bin and dup.bin are the same 3 MiB: one list of chunks, stored once.
    let random = node_at(&repo, &snap.tree, "data/a/b/random.bin").await;
    let dup = node_at(&repo, &snap.tree, "data/a/dup.bin").await;
    assert!(random.content.as_ref().unwrap().len() > 1);
    assert_eq!(random.content, dup.content);

    // A fresh handle, as a second process would open it.
    let repo = Repository::open(env.storage("tree")).await.unwrap();
    let (found, _) = repo.find_snapshot("latest").await.unwrap();
    assert_eq!(found, id);
    let out = tempfile::tempdir().unwrap();
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(summary.skipped.is_empty(), "{:?}", summary.skipped);
    assert!(
        summary.metadata_failed.is_empty(),
        "{:?}",
        summary.metadata_failed
    );
    assert!(summary.files > 10_000);
    let (before, after) = (listing(&data), listing(&out.path().join("data")));
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b, a);
    }
    let small = after.iter().find(|e| e.rel == "a/small.txt").unwrap();
    assert_eq!(
        small.xattrs,
        [(b"user.kura.test".to_vec(), b"\x00binary\xffvalue".to_vec())]
    );
    assert!(after.iter().any(|e| e.kind == "fifo"));
    let a = std::fs::metadata(out.path().join("data/hard")).unwrap();
    let b = std::fs::metadata(out.path().join("data/a/small.txt")).unwrap();
    assert_eq!(a.ino(), b.ino(), "hard links restored as one file");
    let src_mtime = std::fs::metadata(data.join("a/b/random.bin"))
        .unwrap()
        .mtime();
    let dst_mtime = std::fs::metadata(out.path().join("data/a/b/random.bin"))
        .unwrap()
        .mtime();
    assert_eq!(src_mtime, dst_mtime);

    // What the upstream holds is gateway ciphertext, never the text we backed up.
    for f in env.stored_files() {
        let bytes = std::fs::read(&f).unwrap();
        assert_eq!(&bytes[..4], b"KURA", "{}", f.display());
        assert!(!bytes.windows(16).any(|w| w == b"kura backup line"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_backup_of_unchanged_data_adds_only_its_snapshot() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("f"), pseudo_random(2 << 20, 7)).unwrap();
    let mut repo = Repository::init(env.storage("again"), small_params())
        .await
        .unwrap();
    let (first, one) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert!(one.summary.blobs_added > 10);
    let mut fresh = Repository::open(env.storage("again")).await.unwrap();
    let (second, two) = backup(&mut fresh, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert_ne!(first, second, "two snapshots");
    assert_eq!(two.summary.blobs_added, 0);
    assert_eq!(two.tree, one.tree, "same content, same tree");
    assert_eq!(fresh.snapshots().await.unwrap().len(), 2);
    // The first handle saw its own backup's blobs: a third backup through it adds none.
    let (_, three) = backup(&mut repo, Source::Paths(vec![src.path().into()]), opts())
        .await
        .unwrap();
    assert_eq!(three.summary.blobs_added, 0);
    assert_eq!(repo.index().len(), fresh.index().len());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_with_zero_regions_is_stored_without_them_and_restored_sparse() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let image = src.path().join("disk.img");
    let block = 64 << 10;
    let mut bytes = Vec::new();
    bytes.extend(pseudo_random(3 * block, 3));
    bytes.extend(vec![0u8; 10 * block]);
    bytes.extend(pseudo_random(block + 100, 4));
    bytes.extend(vec![0u8; 4 * block]);
    std::fs::write(&image, &bytes).unwrap();
    let mut repo = Repository::init(env.storage("img"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Block(image.clone()), opts())
        .await
        .unwrap();
    assert!(
        snap.summary.bytes_added < 6 * block as u64,
        "zeros were stored: {} bytes added (5 data blocks and a tree expected)",
        snap.summary.bytes_added
    );
    let tree = repo.read_tree(&snap.tree).await.unwrap();
    let content = tree.nodes[0].content.clone().unwrap();
    let zeros: u64 = content
        .iter()
        .map(|c| match c {
            Content::Zero { zero } => *zero,
            Content::Blob { .. } => 0,
        })
        .sum();
    // 10 blocks in the middle; the tail is 100 data bytes, then zeros in a partly-data block
    // and three whole zero blocks, the last of them short.
    assert!(zeros >= 13 * block as u64, "{zeros}");

    let out = tempfile::tempdir().unwrap();
    restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let restored = out.path().join("disk.img");
    assert_eq!(std::fs::read(&restored).unwrap(), bytes);
    let allocated = std::fs::metadata(&restored).unwrap().blocks() * 512;
    assert!(
        allocated < bytes.len() as u64 / 2,
        "restored file is sparse ({allocated} bytes allocated)"
    );
}

/// The scale: a 512 MiB image, mostly zeros, with data regions at unaligned
/// offsets; default block size. Compared with the source in pieces, never whole in memory.
#[tokio::test(flavor = "multi_thread")]
async fn a_512_mib_image_with_zero_regions_round_trips_sparse() {
    use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
    const LEN: u64 = 512 << 20;
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let image = src.path().join("disk.img");
    let mut file = std::fs::File::create(&image).unwrap();
    file.set_len(LEN).unwrap();
    let mut data = 0u64;
    for i in 0..16u64 {
        // 1 MiB + 4097 bytes at an odd offset in every 32 MiB stretch, the last at the end.
        let at = if i == 15 {
            LEN - (1 << 20)
        } else {
            i * (32 << 20) + 12_345 * i
        };
        let region = pseudo_random((1 << 20) + 4097, 100 + i);
        let region = &region[..usize::try_from((LEN - at).min(region.len() as u64)).unwrap()];
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(region).unwrap();
        data += region.len() as u64;
    }
    drop(file);
    let mut repo = Repository::init(env.storage("img512"), Params::default())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Block(image.clone()), opts())
        .await
        .unwrap();
    // Only what SEEK_DATA shows is read (issue 26 item 2): each region's file-system
    // blocks, within at most three 1 MiB blocks.
    assert_eq!(snap.block.as_ref().unwrap().read, "seek_data");
    assert!(
        snap.summary.bytes_read <= (16 * 3) << 20,
        "the holes were read: {} bytes",
        snap.summary.bytes_read
    );
    // Each region touches at most three 1 MiB blocks.
    assert!(
        snap.summary.bytes_added <= (16 * 3) << 20,
        "zeros were stored: {} bytes added for {data} data bytes",
        snap.summary.bytes_added
    );
    let out = tempfile::tempdir().unwrap();
    restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let restored = out.path().join("disk.img");
    let mut source = std::fs::File::open(&image).unwrap();
    let mut copy = std::fs::File::open(&restored).unwrap();
    assert_eq!(copy.metadata().unwrap().len(), LEN);
    let (mut want, mut got) = (vec![0u8; 8 << 20], vec![0u8; 8 << 20]);
    for piece in 0..LEN / (8 << 20) {
        source.read_exact(&mut want).unwrap();
        copy.read_exact(&mut got).unwrap();
        assert!(want == got, "restored image differs in piece {piece}");
    }
    let allocated = copy.metadata().unwrap().blocks() * 512;
    assert!(
        allocated < 64 << 20,
        "restored image is not sparse ({allocated} bytes allocated)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_from_stdin_comes_back_to_a_writer() {
    let env = Env::start().await;
    let data = [
        pseudo_random(1 << 20, 9),
        "text ".repeat(50_000).into_bytes(),
    ]
    .concat();
    let mut repo = Repository::init(env.storage("stream"), small_params())
        .await
        .unwrap();
    let source = Source::Stdin {
        name: "db.dump".into(),
        reader: Box::new(std::io::Cursor::new(data.clone())),
    };
    let (_, snap) = backup(&mut repo, source, opts()).await.unwrap();
    let tree = repo.read_tree(&snap.tree).await.unwrap();
    assert_eq!(tree.nodes[0].name.as_deref(), Some("db.dump"));
    let mut out = Vec::new();
    kura_repo::write_content(&repo, &tree.nodes[0], &mut out)
        .await
        .unwrap();
    assert_eq!(out, data);
}

#[tokio::test(flavor = "multi_thread")]
async fn init_refuses_an_existing_repository_and_open_names_a_missing_one() {
    let env = Env::start().await;
    Repository::init(env.storage("once"), Params::default())
        .await
        .unwrap();
    let again = Repository::init(env.storage("once"), Params::default()).await;
    assert!(matches!(again, Err(RepoError::AlreadyExists)));
    let missing = Repository::open(env.storage("nothing-here")).await;
    assert!(matches!(missing, Err(RepoError::NotFound(_))));
}

/// Flips a byte in the middle of each of `packs` (the gateway's ciphertext), or with
/// `everywhere` one in every 4 KiB.
pub fn damage(packs: &[std::path::PathBuf], everywhere: bool) {
    for f in packs {
        let mut b = std::fs::read(f).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 1;
        if everywhere {
            b.iter_mut().step_by(4096).for_each(|x| *x ^= 1);
        }
        std::fs::write(f, b).unwrap();
    }
}

pub fn packs(env: &Env) -> Vec<std::path::PathBuf> {
    env.stored_files()
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("/data/"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_pack_fails_restore_instead_of_writing_wrong_bytes() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("f"), pseudo_random(1 << 20, 5)).unwrap();
    let mut repo = Repository::init(env.storage("dmg"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.path().join("f")]), opts())
        .await
        .unwrap();
    // The tree's pack too: the root tree cannot be read, and nothing can be restored.
    damage(&packs(&env), false);
    let out = tempfile::tempdir().unwrap();
    let err = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RepoError::Storage { .. } | RepoError::Corrupt { .. }),
        "{err}"
    );
}

/// Regression: a restore stopped at the first file it could not restore, leaving the rest
/// of the tree unrestored. Now it lists the file and goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_goes_on_past_a_file_in_a_damaged_pack() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::write(data.join("a.bin"), pseudo_random(1 << 20, 11)).unwrap();
    let mut repo = Repository::init(env.storage("part"), small_params())
        .await
        .unwrap();
    // a.bin's blobs go into packs of their own, damaged below.
    backup(&mut repo, Source::Paths(vec![data.join("a.bin")]), opts())
        .await
        .unwrap();
    let damaged = packs(&env);
    std::fs::write(data.join("b.bin"), pseudo_random(1 << 20, 12)).unwrap();
    std::fs::write(data.join("sub/c.txt"), b"small").unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    damage(&damaged, false);
    let out = tempfile::tempdir().unwrap();
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(
        matches!(summary.failed.as_slice(), [f] if f.starts_with("data/a.bin: ")),
        "{:?}",
        summary.failed
    );
    assert!(!out.path().join("data/a.bin").exists());
    assert!(std::fs::read(out.path().join("data/b.bin")).unwrap() == pseudo_random(1 << 20, 12));
    assert_eq!(
        std::fs::read(out.path().join("data/sub/c.txt")).unwrap(),
        b"small"
    );
}

/// Subdirectories' trees come in runs of up to 32, one range GET each (issue 27); a run
/// that cannot be read whole is read tree by tree, so a damaged tree fails its own
/// directory and not the 31 beside it in its run.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_tree_fails_only_its_own_directory_and_not_the_others_read_with_it() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    // 16 empty files a directory, each with an xattr of 512 random bytes: trees of about
    // 10 KiB, so that one 64 KiB segment of the stored pack holds a few of a run's 32.
    for d in 0..100 {
        let dir = data.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..16 {
            let file = dir.join(format!("file-{d}-{f}"));
            std::fs::write(&file, b"").unwrap();
            set_xattr(&file, "user.kura.noise", &pseudo_random(512, d * 100 + f));
        }
    }
    let mut repo = Repository::init(env.storage("tree-damage"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    let trees = crate::small_files::tree_packs(&repo, snap.tree).await;
    let stored: Vec<_> = env
        .stored_files()
        .into_iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| trees.contains(n.to_string_lossy().as_ref()))
        })
        .collect();
    assert_eq!(stored.len(), 1, "one pack of trees: {stored:?}");
    assert!(
        std::fs::metadata(&stored[0]).unwrap().len() > 4 * 65536,
        "the trees span several segments"
    );
    damage(&stored, false);
    let out = tempfile::tempdir().unwrap();
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let failed = summary.failed.len();
    assert!(
        (1..32).contains(&failed),
        "{failed} directories failed: {:?}",
        summary.failed
    );
    let whole = (0..100)
        .filter(|d| {
            std::fs::read_dir(out.path().join(format!("data/d{d:03}")))
                .is_ok_and(|entries| entries.count() == 16)
        })
        .count();
    assert_eq!(whole, 100 - failed, "every other directory came back whole");
}

/// A repository at `prefix` with one snapshot of a directory `data` holding `files`
/// (name, content).
pub async fn snapshot_of_data(
    env: &Env,
    prefix: &str,
    files: &[(String, Vec<u8>)],
) -> (Repository<kura_repo::S3Storage>, kura_repo::Snapshot) {
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for (name, content) in files {
        std::fs::write(data.join(name), content).unwrap();
    }
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data]), opts())
        .await
        .unwrap();
    (repo, snap)
}

/// A repository at `prefix` with a snapshot of `8 * FAILURES_IN_A_ROW + 2` files of 4 KiB,
/// a hard link `link` to `f000`, and one new file `zz`: the old files' blobs lie in packs
/// (shared) that are then damaged, `zz`'s blobs and the trees in packs of their own.
/// Returns the repository, the snapshot and the number of damaged files.
async fn repository_with_a_run_of_damage(
    env: &Env,
    prefix: &str,
) -> (Repository<kura_repo::S3Storage>, kura_repo::Snapshot, usize) {
    let src = tempfile::tempdir().unwrap();
    let (first, second) = (src.path().join("first"), src.path().join("second"));
    std::fs::create_dir_all(&first).unwrap();
    let n = 8 * kura_repo::FAILURES_IN_A_ROW + 2;
    for i in 0..n {
        std::fs::write(
            first.join(format!("f{i:03}")),
            pseudo_random(4096, i as u64),
        )
        .unwrap();
    }
    std::fs::hard_link(first.join("f000"), first.join("link")).unwrap();
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    backup(&mut repo, Source::Paths(vec![first.clone()]), opts())
        .await
        .unwrap();
    let damaged = packs(env);
    std::fs::rename(&first, &second).unwrap();
    std::fs::write(second.join("zz"), b"new").unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![second]), opts())
        .await
        .unwrap();
    damage(&damaged, true);
    (repo, snap, n)
}

/// Regression: a restore gave up after `FAILURES_IN_A_ROW` failures in a row, and small
/// files share packs, so one damaged pack stopped it. Now a run that long only makes it
/// check that the storage still serves the repository.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_of_failures_from_damaged_packs_does_not_stop_the_restore() {
    let env = Env::start().await;
    let (repo, snap, n) = repository_with_a_run_of_damage(&env, "run").await;
    let out = tempfile::tempdir().unwrap();
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert_eq!(summary.failed.len(), n + 1, "{:?}", summary.failed);
    assert!(
        summary
            .failed
            .iter()
            .any(|f| f.starts_with("second/link: a hard link of ")),
        "the further name of a failed file says why: {:?}",
        summary.failed
    );
    assert_eq!(std::fs::read(out.path().join("second/zz")).unwrap(), b"new");
    assert!(!out.path().join("second/f000").exists());
}

/// A run of failures while the storage no longer serves the repository (its `config` is
/// gone) is an outage: the restore gives up rather than try every file of the tree.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_gives_up_on_a_run_of_failures_when_the_storage_stops_serving_the_repository() {
    let env = Env::start().await;
    let (repo, snap, _) = repository_with_a_run_of_damage(&env, "gone").await;
    // What a restore that goes through every file asks of the gateway, to compare with.
    let gets = env.gets_answered().await;
    let out = tempfile::tempdir().unwrap();
    restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    let all_gets = env.gets_answered().await - gets;
    let config: Vec<_> = env
        .stored_files()
        .into_iter()
        .filter(|f| f.ends_with("gone/config"))
        .collect();
    assert_eq!(config.len(), 1, "{config:?}");
    std::fs::remove_file(&config[0]).unwrap();
    let out = tempfile::tempdir().unwrap();
    let gets = env.gets_answered().await;
    let err = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap_err();
    let gets = env.gets_answered().await - gets;
    assert!(
        gets * 3 < all_gets,
        "{gets} GETs of {all_gets}: files were still started after it gave up"
    );
    assert!(
        matches!(err, RepoError::Storage { .. } | RepoError::Corrupt { .. }),
        "{err}"
    );
    // Files that were being written when it gave up finished or were removed.
    for entry in std::fs::read_dir(out.path().join("second")).unwrap() {
        let entry = entry.unwrap();
        assert_eq!(entry.file_name(), "zz", "left behind");
        assert_eq!(std::fs::read(entry.path()).unwrap(), b"new");
    }
}

/// A run of failures that are the target's own (here a directory where each file goes;
/// a full or read-only file system alike) stops the restore: every further entry would
/// fail the same way.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_gives_up_on_a_run_of_failures_writing_the_target() {
    let env = Env::start().await;
    let n = 2 * kura_repo::FAILURES_IN_A_ROW;
    let files: Vec<_> = (0..n)
        .map(|i| (format!("f{i:02}"), format!("{i}").into_bytes()))
        .collect();
    let (repo, snap) = snapshot_of_data(&env, "full", &files).await;
    let out = tempfile::tempdir().unwrap();
    for i in 0..n {
        std::fs::create_dir_all(out.path().join(format!("data/f{i:02}"))).unwrap();
    }
    let err = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap_err();
    assert!(matches!(err, RepoError::Io { .. }), "{err}");
}

/// Regression: an in-place restore removed a file it could not open for writing (here a
/// running program, which Linux refuses to open for writing even to root: ETXTBSY), so a
/// failed restore deleted what it had not replaced. A restore now never opens the old
/// file: it writes a new one and renames it over the old name, as a package manager
/// replaces a running program, which keeps running from the old inode. (A file whose
/// content fails keeps its old version: `restore_in_place`.)
#[tokio::test(flavor = "multi_thread")]
async fn a_running_program_in_the_target_is_replaced_and_keeps_running() {
    let env = Env::start().await;
    let files = [
        ("prog".to_string(), b"the snapshot's prog".to_vec()),
        ("other".to_string(), b"other".to_vec()),
    ];
    let (repo, snap) = snapshot_of_data(&env, "busy", &files).await;
    let out = tempfile::tempdir().unwrap();
    let prog = out.path().join("data/prog");
    std::fs::create_dir_all(prog.parent().unwrap()).unwrap();
    std::fs::copy("/bin/sleep", &prog).unwrap();
    let mut running = std::process::Command::new(&prog).arg("60").spawn().unwrap();
    let busy = std::fs::OpenOptions::new().write(true).open(&prog);
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all()).await;
    let still_running = running.try_wait().unwrap().is_none();
    running.kill().unwrap();
    running.wait().unwrap();
    assert_eq!(
        busy.map(drop).map_err(|e| e.raw_os_error()),
        Err(Some(26)),
        "this test needs a kernel that refuses to open a running program for writing (ETXTBSY)"
    );
    let summary = summary.unwrap();
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    assert!(still_running, "the program kept running");
    assert_eq!(std::fs::read(&prog).unwrap(), files[0].1);
    assert_eq!(
        std::fs::read(out.path().join("data/other")).unwrap(),
        b"other"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn include_globs_restore_only_matching_entries_and_their_directories() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    for (path, body) in [
        ("etc/app/config.yaml", "a: 1"),
        ("etc/app/notes.txt", "notes"),
        ("etc/other.yaml", "b: 2"),
        ("var/log/app.log", "log line"),
        ("var/log/old/app.log", "old line"),
        ("var/lib/db", "rows"),
    ] {
        let p = data.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    let mut repo = Repository::init(env.storage("include"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    let restored = |patterns: &[&str]| {
        let repo = &repo;
        let tree = snap.tree;
        let patterns: Vec<String> = patterns.iter().map(|p| (*p).to_string()).collect();
        async move {
            let out = tempfile::tempdir().unwrap();
            let include = Include::new(&patterns).unwrap();
            restore(repo, &tree, out.path(), &include).await.unwrap();
            let mut found: Vec<String> = listing(out.path()).into_iter().map(|e| e.rel).collect();
            found.sort();
            found
        }
    };
    assert_eq!(
        restored(&["**/*.yaml"]).await,
        [
            "data",
            "data/etc",
            "data/etc/app",
            "data/etc/app/config.yaml",
            "data/etc/other.yaml"
        ]
    );
    // `*` stays within one directory.
    assert_eq!(
        restored(&["data/var/log/*.log"]).await,
        ["data", "data/var", "data/var/log", "data/var/log/app.log"]
    );
    // A directory brings everything below it; patterns add up.
    assert_eq!(
        restored(&["/data/var/log/", "data/var/lib/db"]).await,
        [
            "data",
            "data/var",
            "data/var/lib",
            "data/var/lib/db",
            "data/var/log",
            "data/var/log/app.log",
            "data/var/log/old",
            "data/var/log/old/app.log"
        ]
    );
    assert!(restored(&["nothing/here"]).await.is_empty());

    // Regression: a symlink in the target where the snapshot has a directory that a
    // pattern might match below is put back when nothing matched there, and replaced (never
    // written through) when something did.
    let out = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("data")).unwrap();
    let var = out.path().join("data/var");
    std::os::unix::fs::symlink(outside.path(), &var).unwrap();
    for (pattern, kept) in [("**/*.yaml", true), ("data/var/lib/db", false)] {
        let include = Include::new(&[pattern.to_string()]).unwrap();
        restore(&repo, &snap.tree, out.path(), &include)
            .await
            .unwrap();
        assert_eq!(
            std::fs::symlink_metadata(&var).unwrap().is_symlink(),
            kept,
            "{pattern}"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
    assert_eq!(std::fs::read(var.join("lib/db")).unwrap(), b"rows");
}

/// A library caller that stops waiting for a backup (drops its future: a timeout) stops
/// it: the walk, on a blocking thread of its own, would otherwise read the whole source
/// and upload it for nobody. Seen by the stream's writer: once the backup has stopped, the
/// pipe has no reader and a write fails.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_whose_caller_stops_waiting_stops_reading_its_source() {
    use std::io::Write as _;

    let env = Env::start().await;
    let mut repo = Repository::init(env.storage("dropped"), small_params())
        .await
        .unwrap();
    let (reader, mut writer) = std::io::pipe().unwrap();
    let running = tokio::spawn(async move {
        let source = Source::Stdin {
            name: "stream".into(),
            reader: Box::new(reader),
        };
        backup(&mut repo, source, opts()).await
    });
    // Taken in: a write to a pipe returns once the reader has room for what is left.
    let writer = tokio::task::spawn_blocking(move || {
        writer.write_all(&pseudo_random(4 << 20, 9)).unwrap();
        writer
    })
    .await
    .unwrap();
    running.abort();
    assert!(running.await.is_err(), "the backup was still running");

    let refused = tokio::task::spawn_blocking(move || {
        let mut writer = writer;
        let more = pseudo_random(1 << 20, 10);
        // 256 MiB more: a backup still running reads it all.
        (0..256).any(|_| writer.write_all(&more).is_err())
    })
    .await
    .unwrap();
    assert!(refused, "the backup went on reading its source");
}

/// Before: a one-file restore onto an existing file (`kura restore SNAP image.raw`)
/// truncated it before it fetched a byte, so a restore that failed (here a damaged pack)
/// left it empty. The content is written beside it and renamed over it once whole, with
/// the old file's mode.
#[tokio::test(flavor = "multi_thread")]
async fn a_one_file_restore_replaces_the_file_only_once_whole_and_keeps_its_mode() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = pseudo_random(1 << 20, 6);
    std::fs::write(src.path().join("f"), &data).unwrap();
    let mut repo = Repository::init(env.storage("onto"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.path().join("f")]), opts())
        .await
        .unwrap();
    let node = repo.read_tree(&snap.tree).await.unwrap().nodes.remove(0);
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("t.img");
    std::fs::write(&target, b"an older image").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    kura_repo::restore_file(&repo, &node, &target)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), data);
    let mode = std::fs::metadata(&target).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o640);

    damage(&packs(&env), false);
    std::fs::write(&target, b"the image that was there").unwrap();
    let err = kura_repo::restore_file(&repo, &node, &target)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RepoError::Storage { .. } | RepoError::Corrupt { .. }),
        "{err}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"the image that was there");
    let left: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["t.img"], "no temporary file left");
}

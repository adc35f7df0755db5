//! Sparse regular files (issue 22 item 12): all-zero chunks of a file are stored as holes,
//! as for devices, and a restore leaves them as holes, so a sparse file (a VM disk, a
//! database's preallocated file) does not come back dense.

use std::os::unix::fs::MetadataExt as _;

use kura_repo::{Content, Include, Repository, Source, backup, restore};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, pseudo_random};

/// Before: the 30 MiB of zeros were stored as blobs (one, deduplicated) and written back
/// as data: the restored file had every block allocated.
#[tokio::test(flavor = "multi_thread")]
async fn a_sparse_file_is_stored_with_holes_and_restored_sparse() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let data = src.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let path = data.join("disk.img");
    let (head, tail) = (pseudo_random(300_000, 1), pseudo_random(200_000, 2));
    let size: u64 = 32 << 20;
    {
        use std::os::unix::fs::FileExt as _;
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(size).unwrap();
        f.write_all_at(&head, 0).unwrap();
        f.write_all_at(&tail, size - tail.len() as u64).unwrap();
    }
    let mut want = vec![0u8; usize::try_from(size).unwrap()];
    want[..head.len()].copy_from_slice(&head);
    want[usize::try_from(size).unwrap() - tail.len()..].copy_from_slice(&tail);

    let mut repo = Repository::init(env.storage("sparse"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![data.clone()]), opts())
        .await
        .unwrap();
    let root = repo.read_tree(&snap.tree).await.unwrap();
    let dir = root.find(std::ffi::OsStr::new("data")).unwrap();
    let tree = repo.read_tree(&dir.subtree.unwrap()).await.unwrap();
    let node = tree.find(std::ffi::OsStr::new("disk.img")).unwrap();
    let holes: u64 = node
        .content
        .iter()
        .flatten()
        .map(|c| match c {
            Content::Zero { zero } => *zero,
            Content::Blob { .. } => 0,
        })
        .sum();
    assert!(
        holes >= 28 << 20,
        "the zeros are stored as holes: {holes} of {size} bytes"
    );

    let out = tempfile::tempdir().unwrap();
    let summary = restore(&repo, &snap.tree, out.path(), &Include::all())
        .await
        .unwrap();
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    let restored = out.path().join("data/disk.img");
    assert!(std::fs::read(&restored).unwrap() == want, "the content");
    let allocated = std::fs::metadata(&restored).unwrap().blocks() * 512;
    assert!(
        allocated < 4 << 20,
        "the restored file is sparse: {allocated} bytes allocated for {size}"
    );
}

/// Issue 26 item 5. Before: the holes of an image were written as zeros onto the device, so
/// a thin LV (here a loop device over a fully allocated file, whose write-zeroes and
/// discard punch holes in that file) came back fully allocated. Now a hole is zeroed by the
/// device (`fallocate` PUNCH_HOLE: write-zeroes that may unmap, never a fallback to written
/// zeros), and what was there before reads back as zeros.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_onto_a_loop_device_leaves_the_images_holes_unallocated() {
    use kura_testkit::loopdev::Loop;
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let image = src.path().join("vol.img");
    let size: usize = 16 << 20;
    let mut want = vec![0u8; size];
    want[..1 << 20].copy_from_slice(&pseudo_random(1 << 20, 3));
    want[size - (1 << 20)..].copy_from_slice(&pseudo_random(1 << 20, 4));
    std::fs::write(&image, &want).unwrap();
    let mut repo = Repository::init(env.storage("device-holes"), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Block(image.clone()), opts())
        .await
        .unwrap();
    let root = repo.read_tree(&snap.tree).await.unwrap();
    assert_eq!(root.nodes.len(), 1, "a one-file snapshot");
    let node = root.nodes[0].clone();

    // The device held other data everywhere: every block of its backing file allocated.
    let backing = src.path().join("thin.img");
    std::fs::write(&backing, vec![0xAAu8; size]).unwrap();
    let Some(dev) = Loop::attach(&backing) else {
        eprintln!("no loop device can be made here (needs root and losetup): not run");
        return;
    };
    kura_repo::restore_file(&repo, &node, std::path::Path::new(&dev.0))
        .await
        .unwrap();
    drop(dev);
    assert!(
        std::fs::read(&backing).unwrap() == want,
        "the device's content"
    );
    let allocated = std::fs::metadata(&backing).unwrap().blocks() * 512;
    assert!(
        allocated <= 4 << 20,
        "the holes are unallocated: {allocated} bytes of {size} allocated"
    );
}

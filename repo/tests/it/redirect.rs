//! No redirection through symlinks (issue 22 item 8): a directory swapped for a symlink
//! while a backup or a restore is inside it sends neither outside the tree it was given.
//! Both walk with directory file descriptors, so a name is looked up in the directory
//! that was opened, not by a path that a swap can repoint.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use kura_repo::{FileType, Include, Repository, Source, backup, restore};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, Hooked, OnFirst, Op, pseudo_random};

/// Moves the directory `dir` aside (to `dir.real`) and puts a symlink to `outside` in its
/// place, as someone who can write the tree's parent could at any moment.
fn swap_for_link(dir: &Path, outside: &Path) {
    std::fs::rename(dir, dir.with_extension("real")).unwrap();
    std::os::unix::fs::symlink(outside, dir).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Before: the walk listed `d/sub` by its path, through the symlink, and stored the
/// outside directory's secret under the tree's name.
#[tokio::test(flavor = "multi_thread")]
async fn a_directory_swapped_for_a_symlink_during_a_backup_is_not_followed() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let d = src.path().join("d");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    // Read first (names are walked in order), large enough to upload packs meanwhile.
    std::fs::write(d.join("big"), pseudo_random(8 << 20, 1)).unwrap();
    std::fs::write(d.join("sub/mine"), b"the tree's own file").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("sub")).unwrap();
    std::fs::write(outside.path().join("sub/secret"), b"outside the tree").unwrap();

    let (d2, o) = (d.clone(), outside.path().to_path_buf());
    let hook = OnFirst::new(
        Op::Put,
        FileType::Pack,
        || true,
        move || swap_for_link(&d2, &o),
    );
    let storage = Hooked {
        inner: env.storage("swap-backup"),
        hook: hook.clone(),
    };
    let mut repo = Repository::init(storage, small_params()).await.unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![d.clone()]), opts())
        .await
        .unwrap();
    assert!(hook.done(), "the directory was swapped during the backup");

    let root = repo.read_tree(&snap.tree).await.unwrap();
    let top = root.find(std::ffi::OsStr::new("d")).unwrap();
    let tree = repo.read_tree(&top.subtree.unwrap()).await.unwrap();
    let sub = tree.find(std::ffi::OsStr::new("sub")).unwrap();
    let sub = repo.read_tree(&sub.subtree.unwrap()).await.unwrap();
    let names: Vec<String> = sub
        .nodes
        .iter()
        .map(|n| n.name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["mine"],
        "`d/sub` is the directory that was opened, not the symlink's target"
    );
}

/// Restores `tree` of `repo` into `out`, swapping `out/s/d` for a symlink to `outside`
/// once the restore has made `out/s/d` and fetches content.
async fn restore_with_swap(
    env: &Env,
    prefix: &str,
    src: &Path,
    out: &Path,
    outside: &Path,
) -> (PathBuf, Vec<String>) {
    let d = out.join("s/d");
    let (ready, moved) = (d.clone(), d.clone());
    let outside = outside.to_path_buf();
    let hook = OnFirst::new(
        Op::GetRange,
        FileType::Pack,
        move || std::fs::symlink_metadata(&ready).is_ok_and(|m| m.is_dir()),
        move || swap_for_link(&moved, &outside),
    );
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    let (_, snap) = backup(&mut repo, Source::Paths(vec![src.to_path_buf()]), opts())
        .await
        .unwrap();
    drop(repo);
    let storage = Hooked {
        inner: env.storage(prefix),
        hook: hook.clone(),
    };
    let repo = Repository::open(storage).await.unwrap();
    let summary = restore(&repo, &snap.tree, out, &Include::all())
        .await
        .unwrap();
    assert!(hook.done(), "the directory was swapped during the restore");
    (d.with_extension("real"), summary.failed)
}

/// Before: the restore wrote `d/a` and `d/sub/big` by path, through the symlink, over the
/// outside files, and applied `d`'s mode to the outside directory.
#[tokio::test(flavor = "multi_thread")]
async fn a_directory_swapped_for_a_symlink_during_a_restore_leaves_the_outside_alone() {
    let env = Env::start().await;
    let src = tempfile::tempdir().unwrap();
    let s = src.path().join("s");
    std::fs::create_dir_all(s.join("d/sub")).unwrap();
    std::fs::write(s.join("d/a"), b"the snapshot's a").unwrap();
    std::fs::write(s.join("d/sub/big"), pseudo_random(300_000, 2)).unwrap();
    std::fs::set_permissions(s.join("d/a"), std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(s.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();

    let outside = tempfile::tempdir().unwrap();
    let o = outside.path();
    std::fs::create_dir(o.join("sub")).unwrap();
    std::fs::write(o.join("a"), b"outside a").unwrap();
    std::fs::write(o.join("sub/big"), b"outside big").unwrap();
    std::fs::set_permissions(o.join("a"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(o, std::fs::Permissions::from_mode(0o755)).unwrap();

    let out = tempfile::tempdir().unwrap();
    let (real, failed) = restore_with_swap(&env, "swap-restore", &s, out.path(), o).await;

    let outside_file = |name: &str| {
        String::from_utf8_lossy(&std::fs::read(o.join(name)).unwrap())
            .chars()
            .take(40)
            .collect::<String>()
    };
    assert_eq!(outside_file("a"), "outside a");
    assert_eq!(mode(&o.join("a")), 0o600, "the outside file's mode");
    assert_eq!(outside_file("sub/big"), "outside big");
    assert_eq!(mode(o), 0o755, "the outside directory's mode");
    let mut names: Vec<_> = std::fs::read_dir(o)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "sub"], "nothing new outside");

    // The restore went on in the directory it had made.
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(std::fs::read(real.join("a")).unwrap(), b"the snapshot's a");
    assert_eq!(mode(&real.join("a")), 0o666);
    assert!(std::fs::read(real.join("sub/big")).unwrap() == pseudo_random(300_000, 2));
    assert_eq!(mode(&real), 0o700);
}

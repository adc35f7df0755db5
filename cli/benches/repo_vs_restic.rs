//! kura's repository against restic, through the same `kura gateway` (embedded default on
//! a temp directory) in one run; prints throughput, peak memory and the ratios.
//!
//! `cargo bench -p kura --bench repo_vs_restic` with `restic` on PATH (Debian package).
//! `KURA_BENCH_MIB` sizes the image (default 1024; the figure is 4096), three
//! quarters random and one quarter zeros; `KURA_BENCH_FILES` sizes the file tree (default
//! 20000; the figure is 200000); `KURA_BENCH_RUNS` how often each step runs
//! (default 3; the median is shown). Results go in `repo/README.md`. restic's restores
//! are timed with a `sync -f` after them, as kura's end with an `fsync` or `syncfs`; the
//! medians without it are printed too.

#![allow(missing_docs, reason = "a bench binary")]
#![allow(
    clippy::cast_precision_loss,
    reason = "throughput figures are approximate by nature"
)]

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use common::{
    Run, env_number, kura_bin, kura_command, restic_command, same_file, start_gateway, timed,
    timed_then_synced, work_dir, xorshift_fill,
};

mod common;

/// Three quarters random, one quarter zeros, interleaved in 16 MiB stretches.
fn make_image(path: &Path, mib: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut state = 0x1234_5678_9abc_def1u64;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..mib {
        if (i / 16) % 4 == 3 {
            buf.fill(0);
        } else {
            xorshift_fill(&mut buf, &mut state);
        }
        f.write_all(&buf).unwrap();
    }
}

fn make_tree(root: &Path, files: usize) {
    let mut state = 0x0bad_cafe_u64;
    let mut buf = vec![0u8; 8192];
    for i in 0..files {
        let dir = root.join(format!("d{:03}/e{:03}", i / 10_000, (i / 100) % 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        // A draw of its own for the size: drawn from the last fill's state, a size of 0
        // left the state as it was, and every file after the first empty one was empty
        // too (9,200 of 20,000 before 2026-12-07).
        let mut size = [0u8; 8];
        xorshift_fill(&mut size, &mut state);
        let len = (u64::from_le_bytes(size) % 8192) as usize;
        xorshift_fill(&mut buf[..len], &mut state);
        std::fs::write(dir.join(format!("f{i}")), &buf[..len]).unwrap();
    }
}

fn same_tree(a: &Path, b: &Path) -> bool {
    Command::new("diff")
        .arg("-rq")
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

#[allow(
    clippy::too_many_lines,
    reason = "one benchmark script, read top to bottom"
)]
fn main() {
    let mib = env_number("KURA_BENCH_MIB", 1024);
    let files = env_number("KURA_BENCH_FILES", 20_000);
    let runs = env_number("KURA_BENCH_RUNS", 3).max(1);
    let kura = kura_bin();
    let work = work_dir();
    let w = work.path();
    let image = w.join("disk.img");
    make_image(&image, mib);
    let tree = w.join("tree");
    make_tree(&tree, files);

    let (mut gateway, endpoint) = start_gateway(&kura, &w.join("gateway"));

    let cache = w.join("restic-cache");
    let restic = |args: &[&str], repo: &str| restic_command(&endpoint, repo, &cache, args);
    let kura_cmd = |args: &[&str], repo: &str| kura_command(&kura, &endpoint, repo, args);
    let img = image.to_str().unwrap();
    let tree_path = tree.to_str().unwrap();
    // Each step runs `runs` times, restic and kura in turn; a first backup each time into
    // a repository of its own, a re-run and a restore each time into the first one.
    let (mut r_backup, mut k_backup, mut k_block) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let (r_repo, k_repo) = (format!("restic-img-{i}"), format!("kura-img-{i}"));
        timed(&mut restic(&["init"], &r_repo), None);
        r_backup.push(timed(&mut restic(&["backup", img], &r_repo), None));
        timed(&mut kura_cmd(&["init"], &k_repo), None);
        k_backup.push(timed(&mut kura_cmd(&["backup", img], &k_repo), None));
        k_block.push(timed(
            &mut kura_cmd(&["backup", "--block", img], &k_repo),
            None,
        ));
    }
    let (mut r_stdin, mut k_stdin, mut k_block_again) = (Vec::new(), Vec::new(), Vec::new());
    let (mut r_restore, mut k_restore) = (Vec::new(), Vec::new());
    for i in 0..runs {
        r_stdin.push(timed(
            &mut restic(
                &["backup", "--stdin", "--stdin-filename", "disk.img"],
                "restic-img-0",
            ),
            Some(&image),
        ));
        k_stdin.push(timed(
            &mut kura_cmd(
                &["backup", "--stdin", "--stdin-name", "disk.img"],
                "kura-img-0",
            ),
            Some(&image),
        ));
        k_block_again.push(timed(
            &mut kura_cmd(&["backup", "--block", img], "kura-img-0"),
            None,
        ));
        let r_out = w.join("r-out");
        r_restore.push(timed_then_synced(
            &mut restic(
                &[
                    "restore",
                    "latest",
                    "--path",
                    img,
                    "--target",
                    r_out.to_str().unwrap(),
                ],
                "restic-img-0",
            ),
            w,
        ));
        if i == 0 {
            assert!(
                same_file(&image, &r_out.join(img.trim_start_matches('/'))),
                "restic restored other bytes"
            );
        }
        // Restored copies go once checked: page cache the next runs would have to reclaim.
        std::fs::remove_dir_all(&r_out).unwrap();
        let k_out = w.join("k-out");
        k_restore.push(timed(
            &mut kura_cmd(
                // The file and `--block` runs share a path; the stdin runs are another group.
                &["restore", "latest", "--path", img, k_out.to_str().unwrap()],
                "kura-img-0",
            ),
            None,
        ));
        if i == 0 {
            assert!(
                same_file(&image, &k_out.join("disk.img")),
                "kura restored other bytes"
            );
        }
        std::fs::remove_dir_all(&k_out).unwrap();
    }

    let (mut r_tree, mut k_tree) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let (r_repo, k_repo) = (format!("restic-tree-{i}"), format!("kura-tree-{i}"));
        timed(&mut restic(&["init"], &r_repo), None);
        r_tree.push(timed(&mut restic(&["backup", tree_path], &r_repo), None));
        timed(&mut kura_cmd(&["init"], &k_repo), None);
        k_tree.push(timed(&mut kura_cmd(&["backup", tree_path], &k_repo), None));
    }
    let (mut r_tree_again, mut k_tree_again) = (Vec::new(), Vec::new());
    let (mut r_tree_restore, mut k_tree_restore) = (Vec::new(), Vec::new());
    for i in 0..runs {
        r_tree_again.push(timed(
            &mut restic(&["backup", tree_path], "restic-tree-0"),
            None,
        ));
        k_tree_again.push(timed(
            &mut kura_cmd(&["backup", tree_path], "kura-tree-0"),
            None,
        ));
        // restic restores the tree under its full path inside the target, kura under its
        // name.
        let r_out = w.join("r-tree");
        r_tree_restore.push(timed_then_synced(
            &mut restic(
                &["restore", "latest", "--target", r_out.to_str().unwrap()],
                "restic-tree-0",
            ),
            w,
        ));
        if i == 0 {
            let restored = r_out.join(tree.strip_prefix("/").unwrap());
            assert!(same_tree(&tree, &restored), "restic restored another tree");
        }
        std::fs::remove_dir_all(&r_out).unwrap();
        let k_out = w.join("k-tree");
        k_tree_restore.push(timed(
            &mut kura_cmd(
                &["restore", "latest", k_out.to_str().unwrap()],
                "kura-tree-0",
            ),
            None,
        ));
        if i == 0 {
            let restored = k_out.join(tree.file_name().unwrap());
            assert!(same_tree(&tree, &restored), "kura restored another tree");
        }
        std::fs::remove_dir_all(&k_out).unwrap();
    }

    let unsynced_image = unsynced(&r_restore);
    let unsynced_tree = unsynced(&r_tree_restore);
    let _ = Command::new("kill").arg(gateway.id().to_string()).status();
    let _ = gateway.wait();

    println!("each figure the median of {runs} runs (KURA_BENCH_RUNS), peak memory the highest");
    report(
        mib,
        files,
        [r_backup, r_stdin, synced(r_restore)].map(Run::median),
        [k_backup, k_stdin, k_restore].map(Run::median),
        [k_block, k_block_again].map(Run::median),
    );
    report_tree(
        files,
        [r_tree, r_tree_again, synced(r_tree_restore)].map(Run::median),
        [k_tree, k_tree_again, k_tree_restore].map(Run::median),
    );
    println!(
        "restic's restores include a `sync -f` of their target's file system, since kura's end with their writes durable; \
         without it restic's medians were {:.3} s (image) and {:.3} s (tree)",
        unsynced_image.seconds, unsynced_tree.seconds
    );
}

/// The runs of [`timed_then_synced`], each with its sync counted in.
fn synced(runs: Vec<(Run, f64)>) -> Vec<Run> {
    runs.into_iter().map(|(run, _)| run).collect()
}

/// The median of the same runs with each one's sync taken out.
fn unsynced(runs: &[(Run, f64)]) -> Run {
    Run::median(
        runs.iter()
            .map(|(run, sync)| Run {
                seconds: run.seconds - sync,
                peak_kib: run.peak_kib,
            })
            .collect(),
    )
}

/// Prints the image's table: restic and kura runs in the order image backup, stdin
/// re-run, restore; then kura's `--block` runs.
fn report(mib: usize, files: usize, r: [Run; 3], k: [Run; 3], block: [Run; 2]) {
    let gib = mib as f64 / 1024.0;
    let [r_backup, r_stdin, r_restore] = r;
    let [k_backup, k_stdin, k_restore] = k;
    let [k_block, k_block_again] = block;
    let mbps = |r: &Run| mib as f64 * 1.048_576 / r.seconds;
    println!(
        "image: {mib} MiB ({gib:.2} GiB, 3/4 random, 1/4 zeros); tree: {files} files; gateway: kura gateway, embedded default"
    );
    let rows = [
        ("image backup (file)", &r_backup, &k_backup),
        ("image re-run (stdin, nothing new)", &r_stdin, &k_stdin),
        ("image restore", &r_restore, &k_restore),
    ];
    for (what, r, k) in rows {
        println!(
            "{what:36} restic {:7.1} MB/s {:6} MiB peak | kura {:7.1} MB/s {:6} MiB peak | ratio {:.2}x",
            mbps(r),
            r.peak_kib / 1024,
            mbps(k),
            k.peak_kib / 1024,
            r.seconds / k.seconds
        );
    }
    println!(
        "kura --block first {:.1} MB/s, unchanged re-run {:.1} MB/s ({} MiB peak)",
        mbps(&k_block),
        mbps(&k_block_again),
        k_block_again.peak_kib / 1024
    );
}

/// Prints the tree's rows: first backup, unchanged re-run, restore; restic then kura.
fn report_tree(files: usize, r: [Run; 3], k: [Run; 3]) {
    let what = ["first backup", "unchanged re-run", "restore"];
    for ((what, r), k) in what.iter().zip(r).zip(k) {
        println!(
            "tree {what:31} restic {:6.1} s {:6} MiB peak | kura {:6.1} s {:6} MiB peak | speed ratio {:.2}x ({files} files)",
            r.seconds,
            r.peak_kib / 1024,
            k.seconds,
            k.peak_kib / 1024,
            r.seconds / k.seconds
        );
    }
}

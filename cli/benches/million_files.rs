//! Memory of `kura backup` over a tree of empty files (issue 5: 1,000,000 files under
//! 300 MB resident), first and unchanged re-run, through a `kura gateway` process on the
//! embedded default; also the restore of that tree.
//!
//! `cargo bench -p kura --bench million_files`; `KURA_BENCH_EMPTY_FILES` sets the count
//! (default 1,000,000, in directories of 1,000), `KURA_BENCH_DIR` where the tree goes.
//! Results go in `repo/README.md`.

#![allow(missing_docs, reason = "a bench binary")]
#![allow(
    clippy::cast_precision_loss,
    reason = "rates are approximate by nature"
)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::{AK, Run, SK, env_number, kura_bin, start_gateway, timed, work_dir};

mod common;

/// The bound on the backup's resident memory.
const LIMIT_MIB: u64 = 300;

const PER_DIR: usize = 1000;

fn make_tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / PER_DIR));
        if i % PER_DIR == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::File::create(dir.join(format!("empty-file-{i:07}"))).unwrap();
    }
}

fn main() {
    let files = env_number("KURA_BENCH_EMPTY_FILES", 1_000_000);
    let kura = kura_bin();
    let work = work_dir();
    let w = work.path();
    let tree = w.join("tree");
    let started = Instant::now();
    make_tree(&tree, files);
    println!(
        "made {files} empty files in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (mut gateway, endpoint) = start_gateway(&kura, &w.join("gateway"));
    let run = |args: &[&str]| {
        let mut c = Command::new(&kura);
        c.args(args)
            .env("KURA_REPOSITORY", "s3://bench/million")
            .env("KURA_ENDPOINT", &endpoint)
            .env("KURA_ACCESS_KEY_ID", AK)
            .env("KURA_SECRET_ACCESS_KEY", SK);
        c
    };
    timed(&mut run(&["init"]), None);
    let first = timed(&mut run(&["backup", tree.to_str().unwrap()]), None);
    let again = timed(&mut run(&["backup", tree.to_str().unwrap()]), None);
    let out = w.join("restored");
    let restore = timed(
        &mut run(&["restore", "latest", out.to_str().unwrap()]),
        None,
    );
    let restored = std::fs::read_dir(out.join("tree"))
        .unwrap()
        .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum::<usize>();
    assert_eq!(restored, files, "every empty file restored");
    let _ = gateway.kill();
    let _ = gateway.wait();
    let line = |what: &str, r: &Run| {
        println!(
            "{what:28} {:7.1} s {:8.0} files/s {:6} MiB peak (limit {LIMIT_MIB} MiB for backup)",
            r.seconds,
            files as f64 / r.seconds,
            r.peak_kib / 1024
        );
    };
    line("backup, first", &first);
    line("backup, unchanged re-run", &again);
    line("restore", &restore);
    let worst = first.peak_kib.max(again.peak_kib) / 1024;
    println!(
        "backup peak {worst} MiB: {}",
        if worst < LIMIT_MIB {
            "within the limit"
        } else {
            "OVER THE LIMIT"
        }
    );
}

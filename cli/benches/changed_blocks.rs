//! Changed-block backups against full reads and restic (issue 26 item 7), through the same
//! `kura gateway` (embedded default on a temp directory) in one run.
//!
//! A sparse image of `KURA_BENCH_GIB` GiB (default 64) with `KURA_BENCH_ALLOCATED_GIB`
//! (default 8) of random data in 64 MiB stretches spread over it; then
//! `KURA_BENCH_CHANGED_PERMILLE` per mille of the image (default 10: 1%) rewritten in
//! 1 MiB pieces inside the data, and listed in an `OFFSET LENGTH` file as a changed-block
//! source would list them. Timed: kura's first backup (only the data, by `SEEK_DATA`),
//! its incremental with `--changed`, a full `--block` re-run, restic's first backup and
//! re-run of the same file; then a full restore and kura's `--only-changed-since` restore
//! onto it, beside restic's restore.
//!
//! `cargo bench -p kura --bench changed_blocks` with `restic` on PATH (Debian package);
//! the work directory (`KURA_BENCH_DIR`, default `/tmp`) needs about 5 times the allocated
//! size free. Results go in `repo/README.md`.

#![allow(missing_docs, reason = "a bench binary")]
#![allow(
    clippy::cast_precision_loss,
    reason = "throughput figures are approximate by nature"
)]

use std::fmt::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::process::Command;

use common::{
    Run, env_number, kura_bin, kura_command, restic_command, same_file, start_gateway, timed,
    work_dir, xorshift_fill,
};

mod common;

const MIB: u64 = 1 << 20;
const STRETCH: u64 = 64 * MIB;

/// The data stretches' offsets: `allocated` bytes in 64 MiB stretches spread evenly over
/// `size` bytes.
fn stretches(size: u64, allocated: u64) -> Vec<u64> {
    let n = (allocated / STRETCH).max(1);
    let step = (size / STRETCH / n).max(1) * STRETCH;
    (0..n)
        .map(|i| i * step)
        .filter(|&o| o + STRETCH <= size)
        .collect()
}

fn make_image(path: &Path, size: u64, data: &[u64]) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
    let mut state = 0x1234_5678_9abc_def1u64;
    let mut buf = vec![0u8; 8 << 20];
    for &at in data {
        for part in 0..STRETCH / buf.len() as u64 {
            xorshift_fill(&mut buf, &mut state);
            f.write_all_at(&buf, at + part * buf.len() as u64).unwrap();
        }
    }
    f.sync_all().unwrap();
}

/// Rewrites `bytes` of the data in 1 MiB pieces spread over the stretches; returns the
/// extents file's text.
fn change(path: &Path, data: &[u64], bytes: u64) -> String {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let pieces = (bytes / MIB).max(1);
    let per_stretch = pieces.div_ceil(data.len() as u64);
    let gap = (STRETCH / MIB / per_stretch).max(1) * MIB;
    let mut state = 0x0dd_ba11_u64;
    let mut buf = vec![0u8; usize::try_from(MIB).unwrap()];
    let mut list = String::new();
    let mut done = 0;
    'all: for &at in data {
        for k in 0..per_stretch {
            if done == pieces {
                break 'all;
            }
            let o = at + k * gap;
            xorshift_fill(&mut buf, &mut state);
            f.write_all_at(&buf, o).unwrap();
            let _ = writeln!(list, "{o} {MIB}");
            done += 1;
        }
    }
    f.sync_all().unwrap();
    list
}

#[allow(
    clippy::too_many_lines,
    reason = "one benchmark script, read top to bottom"
)]
fn main() {
    let size = env_number("KURA_BENCH_GIB", 64) as u64 * 1024 * MIB;
    let allocated = env_number("KURA_BENCH_ALLOCATED_GIB", 8) as u64 * 1024 * MIB;
    let changed = size / 1000 * env_number("KURA_BENCH_CHANGED_PERMILLE", 10) as u64;
    let kura = kura_bin();
    let work = work_dir();
    let w = work.path();
    let image = w.join("vol.img");
    let data = stretches(size, allocated);
    make_image(&image, size, &data);
    let (mut gateway, endpoint) = start_gateway(&kura, &w.join("gateway"));
    let cache = w.join("restic-cache");
    let restic = |args: &[&str]| restic_command(&endpoint, "restic", &cache, args);
    let kura_cmd = |args: &[&str]| kura_command(&kura, &endpoint, "kura", args);
    let img = image.to_str().unwrap();
    let block = ["backup", "--block", "--source-id", "vol", "--host", "bench"];
    let snapshot_ids = || -> Vec<String> {
        let out = kura_cmd(&["snapshots", "--json"]).output().unwrap();
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };

    timed(&mut restic(&["init"]), None);
    let r_first = timed(&mut restic(&["backup", img]), None);
    timed(&mut kura_cmd(&["init"]), None);
    let k_first = timed(
        &mut kura_cmd(&block.iter().copied().chain([img]).collect::<Vec<_>>()),
        None,
    );
    let first_id = snapshot_ids().pop().unwrap();

    let list = change(&image, &data, changed);
    let extents = w.join("changed.list");
    std::fs::write(&extents, list).unwrap();
    let ext = extents.to_str().unwrap();
    let k_incr = timed(
        &mut kura_cmd(
            &block
                .iter()
                .copied()
                .chain(["--parent", "latest", "--changed", ext, img])
                .collect::<Vec<_>>(),
        ),
        None,
    );
    let incr_id = snapshot_ids().pop().unwrap();
    let k_full = timed(
        &mut kura_cmd(&block.iter().copied().chain([img]).collect::<Vec<_>>()),
        None,
    );
    let r_again = timed(&mut restic(&["backup", img]), None);

    // Restores: restic's of today's image; kura's of yesterday's, then only what changed.
    let target = w.join("target.img");
    // restic before 0.14's successor has no --sparse: it would write every zero of the
    // image (64 GiB by default), so its restore is run only where it has the flag.
    let sparse = restic(&["restore", "--help"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--sparse"));
    let r_restore = sparse.then(|| {
        let run = timed(
            &mut restic(&[
                "restore",
                "latest",
                "--sparse",
                "--target",
                w.join("r-out").to_str().unwrap(),
            ]),
            None,
        );
        let r_out = w.join("r-out").join(image.strip_prefix("/").unwrap());
        assert!(same_file(&image, &r_out), "restic restored other bytes");
        std::fs::remove_dir_all(w.join("r-out")).unwrap();
        run
    });
    // An existing file takes a one-file snapshot (a missing path would be a directory).
    std::fs::File::create(&target).unwrap();
    let t = target.to_str().unwrap();
    let k_restore = timed(&mut kura_cmd(&["restore", &first_id, t]), None);
    let k_restore_changed = timed(
        &mut kura_cmd(&["restore", &incr_id, t, "--only-changed-since", &first_id]),
        None,
    );
    assert!(
        same_file(&image, &target),
        "kura's incremental restore gave other bytes"
    );

    let _ = Command::new("kill").arg(gateway.id().to_string()).status();
    let _ = gateway.wait();

    let gib = |b: u64| b as f64 / (1024.0 * 1024.0 * 1024.0);
    println!(
        "image: {:.1} GiB sparse, {:.1} GiB allocated, {:.2} GiB changed; gateway: kura gateway, embedded default",
        gib(size),
        gib(data.len() as u64 * STRETCH),
        gib(changed)
    );
    let row = |what: &str, r: Option<&Run>, k: &Run| {
        let r_text = r.map_or_else(
            || "                              ".to_string(),
            |r| {
                format!(
                    "restic {:7.1} s {:6} MiB peak |",
                    r.seconds,
                    r.peak_kib / 1024
                )
            },
        );
        let ratio = r.map_or_else(String::new, |r| {
            format!(" | ratio {:.2}x", r.seconds / k.seconds)
        });
        println!(
            "{what:44} {r_text} kura {:7.1} s {:6} MiB peak{ratio}",
            k.seconds,
            k.peak_kib / 1024
        );
    };
    row(
        "first backup (kura: the data only)",
        Some(&r_first),
        &k_first,
    );
    row(
        "incremental (kura --changed; restic re-run)",
        Some(&r_again),
        &k_incr,
    );
    row(
        "full --block re-run (against the incremental)",
        None,
        &k_full,
    );
    println!(
        "{:44} --changed is {:.2}x the full --block re-run",
        "",
        k_full.seconds / k_incr.seconds
    );
    if r_restore.is_none() {
        println!(
            "(this restic has no restore --sparse: its restore, which would write every zero, not run)"
        );
    }
    row(
        "restore of one snapshot (kura: the older)",
        r_restore.as_ref(),
        &k_restore,
    );
    row(
        "restore --only-changed-since (vs restic's)",
        r_restore.as_ref(),
        &k_restore_changed,
    );
    println!(
        "{:44} --only-changed-since is {:.2}x kura's full restore",
        "",
        k_restore.seconds / k_restore_changed.seconds
    );
}

//! What the repository benchmarks share: a `kura gateway` process on the embedded default,
//! and commands run under GNU `time` for wall time and peak memory.

#![allow(dead_code, reason = "each bench binary uses a different part")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub const AK: &str = "bench";
pub const SK: &str = "bench-secret-key";

/// The `kura` binary the bench runs: `KURA_BENCH_KURA_BIN`, or the one cargo built with
/// it (a bench binary carried to another machine, as `scripts/device-figures` does, names
/// the `kura` carried beside it).
#[must_use]
pub fn kura_bin() -> PathBuf {
    std::env::var_os("KURA_BENCH_KURA_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kura")), PathBuf::from)
}

pub struct Run {
    pub seconds: f64,
    pub peak_kib: u64,
}

impl Run {
    /// The median of `runs` by time, with the highest peak of all (memory is a bound, not
    /// a typical value).
    ///
    /// # Panics
    /// When `runs` is empty.
    #[must_use]
    pub fn median(mut runs: Vec<Run>) -> Run {
        let peak_kib = runs
            .iter()
            .map(|r| r.peak_kib)
            .max()
            .expect("at least one run");
        runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        Run {
            seconds: runs[runs.len() / 2].seconds,
            peak_kib,
        }
    }
}

/// Runs `cmd` under GNU `time` (found on `PATH`) and returns wall time and peak RSS;
/// panics on failure. Starts with `sync`, so that every run begins without another run's
/// dirty pages.
pub fn timed(cmd: &mut Command, stdin: Option<&Path>) -> Run {
    timed_until(cmd, stdin, None).0
}

/// [`timed`], with a `sync -f` of the file system holding `target` run after the command
/// and counted in its time; returns the run and the seconds of the sync alone. For
/// restic's restores, which end before their writes are durable: kura's end with them
/// durable (an `fsync` of a file, a `syncfs` of a tree), so restic's time alone would
/// leave out the writeback that kura's includes.
pub fn timed_then_synced(cmd: &mut Command, target: &Path) -> (Run, f64) {
    timed_until(cmd, None, Some(target))
}

fn timed_until(cmd: &mut Command, stdin: Option<&Path>, synced: Option<&Path>) -> (Run, f64) {
    // Dirty pages left by the previous run would be written back during this one and
    // charge it for the other tool's writes.
    let _ = Command::new("sync").status();
    let mut wrapped = Command::new("time");
    wrapped
        .arg("-f")
        .arg("PEAK %M")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(p) = stdin {
        wrapped.stdin(std::fs::File::open(p).unwrap());
    }
    wrapped.stdout(Stdio::null()).stderr(Stdio::piped());
    let started = Instant::now();
    let out = wrapped.output().unwrap();
    let ran = started.elapsed().as_secs_f64();
    if let Some(target) = synced {
        let status = Command::new("sync").arg("-f").arg(target).status().unwrap();
        assert!(status.success(), "sync -f {} failed", target.display());
    }
    let seconds = started.elapsed().as_secs_f64();
    // Every run on stderr, so that the spread behind a median can be read.
    let of_it = if synced.is_some() {
        format!(" ({:.3} s of it sync -f)", seconds - ran)
    } else {
        String::new()
    };
    eprintln!(
        "ran in {seconds:.3} s{of_it}: {:?}",
        cmd.get_args().collect::<Vec<_>>()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {err}");
    let peak_kib = err
        .lines()
        .filter_map(|l| l.strip_prefix("PEAK "))
        .next_back()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (Run { seconds, peak_kib }, seconds - ran)
}

/// `kura gateway` on the embedded default in `dir`: (process, endpoint URL).
pub fn start_gateway(kura: &Path, dir: &Path) -> (std::process::Child, String) {
    let (mut cmd, port) = kura_testkit::process::gateway_command(kura);
    cmd.arg("--data-dir")
        .arg(dir)
        .env("KURA_ACCESS_KEY_ID", AK)
        .env("KURA_SECRET_ACCESS_KEY", SK)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let gateway = kura_testkit::process::spawn_ready(&mut cmd, port);
    (gateway, format!("http://127.0.0.1:{port}"))
}

/// A number from the environment variable `name`, or `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A temporary directory for a run's data, under `KURA_BENCH_DIR` (default `/tmp`).
pub fn work_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(std::env::var("KURA_BENCH_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap()
}

/// Fills `buf` with xorshift64 output from `state` (fast, reproducible, incompressible).
pub fn xorshift_fill(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let b = state.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Whether two files hold the same bytes (`cmp -s`, without reading them into memory).
pub fn same_file(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .arg("-s")
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

/// `restic ARGS` on the repository `repo` (a bucket) of the gateway at `endpoint`.
pub fn restic_command(endpoint: &str, repo: &str, cache: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("restic");
    c.args(args)
        .env("RESTIC_REPOSITORY", format!("s3:{endpoint}/{repo}"))
        .env("RESTIC_PASSWORD", "bench")
        .env("AWS_ACCESS_KEY_ID", AK)
        .env("AWS_SECRET_ACCESS_KEY", SK)
        .env("RESTIC_CACHE_DIR", cache)
        .env_remove("AWS_CA_BUNDLE");
    c
}

/// `kura ARGS` on the repository in bucket `repo` of the gateway at `endpoint`.
pub fn kura_command(kura: &Path, endpoint: &str, repo: &str, args: &[&str]) -> Command {
    let mut c = Command::new(kura);
    c.args(args)
        .env("KURA_REPOSITORY", format!("s3://{repo}/repo"))
        .env("KURA_ENDPOINT", endpoint)
        .env("KURA_ACCESS_KEY_ID", AK)
        .env("KURA_SECRET_ACCESS_KEY", SK);
    c
}

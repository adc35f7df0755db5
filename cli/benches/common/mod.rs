//! What the repository benchmarks share: a `kura gateway` process on the embedded default,
//! and commands run under `/usr/bin/time` for wall time and peak memory.

#![allow(dead_code, reason = "each bench binary uses a different part")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

pub const AK: &str = "bench";
pub const SK: &str = "bench-secret-key";

pub struct Run {
    pub seconds: f64,
    pub peak_kib: u64,
}

/// Runs `cmd` under `/usr/bin/time` and returns wall time and peak RSS; panics on failure.
/// Starts with `sync`, so that every run begins without another run's dirty pages.
pub fn timed(cmd: &mut Command, stdin: Option<&Path>) -> Run {
    // Dirty pages left by the previous run would be written back during this one and
    // charge it for the other tool's writes.
    let _ = Command::new("sync").status();
    let mut wrapped = Command::new("/usr/bin/time");
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
    let seconds = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {err}");
    let peak_kib = err
        .lines()
        .filter_map(|l| l.strip_prefix("PEAK "))
        .next_back()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Run { seconds, peak_kib }
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

//! `kura gateway` as a separate process, the way an operator runs it: started on a free
//! loopback port, waited for until `/healthz` answers, stopped with SIGTERM so that it
//! drains as it would in a pod.

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use crate::net::{free_port, http_get};

/// How long [`wait_ready`] waits for a gateway to answer `/healthz`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);

/// `kura gateway --listen 127.0.0.1:PORT` for the binary at `kura`, on a free port: the
/// command (to which the caller adds the upstream, environment and output) and the port.
#[must_use]
pub fn gateway_command(kura: &Path) -> (Command, u16) {
    let port = free_port();
    let mut cmd = Command::new(kura);
    cmd.args(["gateway", "--listen", &format!("127.0.0.1:{port}")]);
    (cmd, port)
}

/// Spawns `cmd` (from [`gateway_command`]) and waits until it serves on `port`.
///
/// # Panics
/// As [`wait_ready`], or when the process cannot be spawned.
#[must_use]
pub fn spawn_ready(cmd: &mut Command, port: u16) -> Child {
    let mut child = cmd.spawn().expect("spawning kura gateway");
    wait_ready(port, &mut child);
    child
}

/// Waits until the gateway on `port` answers `/healthz` with 200.
///
/// # Panics
/// When `child` exits first, or nothing answers within ten seconds.
pub fn wait_ready(port: u16, child: &mut Child) {
    let polls = READY_TIMEOUT.as_millis() / POLL.as_millis();
    for _ in 0..polls {
        if http_get(port, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the gateway exited before it was ready: {status}");
        }
        std::thread::sleep(POLL);
    }
    panic!("the gateway on port {port} was not ready within {READY_TIMEOUT:?}");
}

/// Sends SIGTERM to `child` (as Kubernetes does) and waits for it to exit.
///
/// # Panics
/// When the process cannot be waited for.
#[must_use = "the exit status says whether it drained cleanly"]
pub fn stop(mut child: Child) -> ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().expect("waiting for the gateway to exit")
}

/// The `kura` binary of the build these tests belong to, built first (once per test
/// process) so that a test never runs a stale binary.
///
/// Cargo gives `CARGO_BIN_EXE_kura` only to the tests of the package that owns the binary;
/// the end-to-end tests live in their own workspace member, so they ask cargo for the
/// binary as a user would, with the same profile and target directory as this test.
///
/// # Panics
/// When cargo cannot build the binary.
#[must_use]
pub fn kura_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        // A test binary lives in TARGET/PROFILE/deps/.
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("a test binary under TARGET/PROFILE/deps");
        let target_dir = profile_dir.parent().expect("TARGET/PROFILE");
        let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        build
            .args(["build", "--quiet", "--package", "kura", "--bin", "kura"])
            .env("CARGO_TARGET_DIR", target_dir);
        // Without what cargo set for this test's own package: build scripts that track
        // them (ring's tracks CARGO_MANIFEST_DIR and CARGO_PKG_*) would otherwise see a
        // change from the test build's values, and the two builds would rebuild each
        // other's dependencies on every run.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
            ]
            .iter()
            .any(|p| name.starts_with(p))
                || name == "CARGO_PRIMARY_PACKAGE"
                || name == "CARGO_TARGET_TMPDIR"
            {
                build.env_remove(&*name);
            }
        }
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                build.arg("--release");
            }
            Some(other) => {
                build.args(["--profile", other]);
            }
            None => panic!("no profile directory above {}", exe.display()),
        }
        let status = build.status().expect("running cargo build");
        assert!(status.success(), "cargo build of kura failed: {status}");
        profile_dir.join("kura")
    })
}

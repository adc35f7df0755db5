//! `kura gateway` as a process: the embedded default's first start, a config file with
//! credentials from a file and from a variable, readiness, and a clean exit on SIGTERM.

use std::io::Read as _;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    std::io::Write::write_all(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

pub fn wait_ready(port: u16, child: &mut Child) {
    for _ in 0..200 {
        if get(port, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("gateway exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("gateway did not become ready");
}

pub fn stop(mut child: Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap()
}

#[test]
fn embedded_default_first_start_makes_keys_and_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args([
            "gateway",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir.path())
        .env_remove("KURA_ACCESS_KEY_ID")
        .env_remove("KURA_SECRET_ACCESS_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    assert!(dir.path().join("kura-keys.toml").exists());
    assert!(dir.path().join("credentials.toml").exists());
    let ready = get(port, "/readyz").unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    assert!(stop(child).success(), "SIGTERM ends the gateway cleanly");
    let mut out = String::new();
    stdout.unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    stderr.unwrap().read_to_string(&mut err).unwrap();
    assert!(
        out.contains("AWS_ACCESS_KEY_ID=kura"),
        "credentials printed on first start: {out}"
    );
    assert!(err.contains("BACK IT UP"), "loud key file warning: {err}");
    let secret = std::fs::read_to_string(dir.path().join("credentials.toml")).unwrap();
    let secret = secret
        .lines()
        .find_map(|l| l.strip_prefix("secret_access_key = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    assert!(!err.contains(&secret), "no secret in the log");
}

#[test]
fn config_file_credentials_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("secret"), "file-secret\n").unwrap();
    let config = format!(
        "listen = \"127.0.0.1:1\"\ndata_dir = \"{}\"\n\n[[credentials]]\naccess_key_id = \"from-file\"\nsecret_access_key_file = \"{}\"\nbuckets = [\"one\"]\n\n[[credentials]]\naccess_key_id = \"from-env\"\nsecret_access_key_env = \"KURA_TEST_SECRET\"\nbuckets = [\"*\"]\n",
        dir.path().join("data").display(),
        dir.path().join("secret").display()
    );
    std::fs::write(dir.path().join("kura.toml"), config).unwrap();
    // --listen overrides the file's address.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args([
            "gateway",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
        ])
        .arg(dir.path().join("kura.toml"))
        .env("KURA_TEST_SECRET", "env-secret")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    assert!(
        !dir.path().join("data/credentials.toml").exists(),
        "configured credentials: none generated"
    );
    assert!(stop(child).success());
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[credentials]]\naccess_key_id = \"x\"\nbuckets = []\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["gateway", "--data-dir"])
        .arg(dir.path().join("d2"))
        .arg("--config")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no secret"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn upstream_timeout_of_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kura.toml");
    std::fs::write(
        &config,
        "key_file = \"keys.toml\"\n\n[upstream]\nurl = \"http://127.0.0.1:1\"\ntimeout = 0\n",
    )
    .unwrap();
    let from_file = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["gateway", "--config"])
        .arg(&config)
        .env("KURA_ACCESS_KEY_ID", "a")
        .env("KURA_SECRET_ACCESS_KEY", "b")
        .output()
        .unwrap();
    let from_flag = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["gateway", "--upstream-timeout", "0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    for (out, says) in [(from_file, "at least 1"), (from_flag, "--upstream-timeout")] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains(says), "{err}");
    }
}

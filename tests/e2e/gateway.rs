//! `kura gateway` as a process: the embedded default's first start, a config file with
//! credentials from a file and from a variable, readiness, and a clean exit on SIGTERM.

use std::io::Read as _;
use std::net::TcpStream;
use std::process::{Command, Stdio};

use kura_testkit::net::{free_port, http_get};
use kura_testkit::process::{kura_bin, stop, wait_ready};

/// `kura gateway` on the embedded default in `dir`, listening on `port`; the caller adds
/// its environment and what becomes of the output.
pub fn embedded_gateway(dir: &std::path::Path, port: u16) -> Command {
    let mut cmd = Command::new(kura_bin());
    cmd.args([
        "gateway",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--data-dir",
    ])
    .arg(dir);
    cmd
}

#[test]
fn embedded_default_first_start_makes_keys_and_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = embedded_gateway(dir.path(), port)
        .env_remove("KURA_ACCESS_KEY_ID")
        .env_remove("KURA_SECRET_ACCESS_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    assert!(dir.path().join("kura-keys.toml").exists());
    assert!(dir.path().join("credentials.toml").exists());
    let ready = http_get(port, "/readyz").unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    assert!(stop(child).success(), "SIGTERM ends the gateway cleanly");
    let mut out = String::new();
    stdout.unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    stderr.unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("BACK IT UP"), "loud key file warning: {err}");
    let secret = std::fs::read_to_string(dir.path().join("credentials.toml")).unwrap();
    let secret = secret
        .lines()
        .find_map(|l| l.strip_prefix("secret_access_key = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    // Standard output is a pod's log when not a terminal: it names the file, never the secret.
    assert!(
        out.contains(&dir.path().join("credentials.toml").display().to_string()),
        "the credentials file named on first start: {out}"
    );
    assert!(!out.contains(&secret), "no secret on stdout: {out}");
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
    let mut child = Command::new(kura_bin())
        .args([
            "gateway",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
        ])
        .arg(dir.path().join("kura.toml"))
        .env("KURA_TEST_SECRET", "env-secret")
        // As set up for the repository commands (their secret is in their config file):
        // the ID alone names a credential this file has, and is accepted.
        .env("KURA_ACCESS_KEY_ID", "from-file")
        .env_remove("KURA_SECRET_ACCESS_KEY")
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
    let out = Command::new(kura_bin())
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
    let from_file = Command::new(kura_bin())
        .args(["gateway", "--config"])
        .arg(&config)
        .env("KURA_ACCESS_KEY_ID", "a")
        .env("KURA_SECRET_ACCESS_KEY", "b")
        .output()
        .unwrap();
    let from_flag = Command::new(kura_bin())
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

/// Settings that would quietly widen access or start on the wrong key are refused, each
/// with a message that names the problem, before anything is served.
#[test]
fn settings_that_would_misbehave_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let scoped = write(
        "scoped.toml",
        "[[credentials]]\naccess_key_id = \"velero\"\nsecret_access_key = \"s3cret\"\nbuckets = [\"velero-backups\"]\n",
    );
    let empty_inline = write(
        "empty.toml",
        "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"\"\nbuckets = [\"*\"]\n",
    );
    let region_only = write("region.toml", "[upstream]\nregion = \"eu-central-1\"\n");
    let secret_only = write(
        "secret.toml",
        "key_file = \"keys.toml\"\n\n[upstream]\nurl = \"http://127.0.0.1:1\"\nsecret_access_key = \"s\"\n",
    );
    let run = |config: Option<&std::path::Path>, extra: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(kura_bin());
        cmd.args(["gateway", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(extra)
            .env_remove("KURA_ACCESS_KEY_ID")
            .env_remove("KURA_SECRET_ACCESS_KEY")
            .env_remove("KURA_KEY_FILE");
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let missing_key = dir.path().join("typo-keys.toml");
    let missing_key = missing_key.to_str().unwrap();
    let cases = [
        // The variable's key would take every bucket from the file's scoped one.
        (
            run(
                Some(&scoped),
                &[],
                &[
                    ("KURA_ACCESS_KEY_ID", "velero"),
                    ("KURA_SECRET_ACCESS_KEY", "x"),
                ],
            ),
            "velero is given more than once",
        ),
        (
            run(
                None,
                &[],
                &[("KURA_ACCESS_KEY_ID", "a"), ("KURA_SECRET_ACCESS_KEY", "")],
            ),
            "empty secret",
        ),
        (run(Some(&empty_inline), &[], &[]), "the secret is empty"),
        (
            run(None, &["--key-file", missing_key], &[]),
            "does not exist",
        ),
        (
            run(Some(&region_only), &[], &[]),
            "[upstream] region only apply with an upstream URL",
        ),
        (run(Some(&secret_only), &[], &[]), "no access_key_id"),
        // Half a credential was dropped without a word.
        (
            run(None, &[], &[("KURA_ACCESS_KEY_ID", "a")]),
            "without KURA_SECRET_ACCESS_KEY",
        ),
        (
            run(None, &[], &[("KURA_SECRET_ACCESS_KEY", "s")]),
            "go together",
        ),
        // --data-dir beside an upstream URL was ignored without a word.
        (
            run(
                None,
                &[
                    "--upstream",
                    "http://127.0.0.1:1",
                    "--key-file",
                    missing_key,
                ],
                &[],
            ),
            "would be ignored",
        ),
    ];
    for (out, says) in cases {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{says}: {err}");
        assert!(err.contains(says), "{says}: {err}");
    }
    assert!(
        !std::path::Path::new(missing_key).exists(),
        "a mistyped key file path makes no new key"
    );
}

/// Regression: with `KURA_LOG=debug`, s3s logged whole requests (the Authorization header,
/// presigned signatures) and the signature it expected for a request that failed. No
/// log level may show them.
#[test]
fn debug_logs_carry_no_signatures() {
    // Before, only the first was covered: a directive more specific than the guard's
    // `s3s=info`, or one for the request span, let s3s's debug events through.
    for filter in [
        "debug",
        "info,s3s::service=debug",
        "info,s3s::ops=trace",
        "info,[request]=debug",
        "trace",
    ] {
        logs_carry_no_signatures_with(filter);
    }
}

/// One run of [`debug_logs_carry_no_signatures`] with `KURA_LOG=filter`.
fn logs_carry_no_signatures_with(filter: &str) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = embedded_gateway(dir.path(), port)
        .env("KURA_LOG", filter)
        .env("KURA_ACCESS_KEY_ID", "logged-ak")
        .env("KURA_SECRET_ACCESS_KEY", "logged-secret")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    let signature = "5e1f".repeat(16);
    let date = Command::new("date")
        .args(["-u", "+%Y%m%dT%H%M%SZ"])
        .output()
        .unwrap();
    let stamp = String::from_utf8(date.stdout).unwrap().trim().to_string();
    let day = &stamp[..8];
    let request = format!(
        "GET /bucket/key HTTP/1.1\r\nHost: x\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nAuthorization: AWS4-HMAC-SHA256 Credential=logged-ak/{day}/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}\r\nConnection: close\r\n\r\n"
    );
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut s, request.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let stderr = child.stderr.take();
    assert!(stop(child).success());
    let mut log = String::new();
    stderr.unwrap().read_to_string(&mut log).unwrap();
    // The gateway's own debug line for the refusal (with the filters that show it).
    assert!(
        !matches!(filter, "debug" | "trace") || log.contains("SignatureDoesNotMatch"),
        "KURA_LOG={filter}: the request reached the signature check: {log}"
    );
    assert!(!log.contains(&signature), "KURA_LOG={filter}: {log}");
    assert!(
        !log.to_ascii_lowercase().contains("signature="),
        "KURA_LOG={filter}: {log}"
    );
}

/// Polls `log` until it holds `count` lines containing `what`, for up to `secs` seconds.
fn wait_for_log(log: &std::path::Path, what: &str, count: usize, secs: u64) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(what).count() >= count || std::time::Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A PUT (with `body`) or GET of `key` in bucket `reload` (the bucket itself for an empty
/// `key`) through the gateway on `port`, signed
/// with SigV4 by curl; the response body.
fn curl_s3(port: u16, method: &str, key: &str, body: Option<&[u8]>) -> Vec<u8> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sf", "-X", method, "--aws-sigv4", "aws:amz:us-east-1:s3"])
        .args(["--user", "reload-ak:reload-secret-0123456789"])
        .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
        .arg(format!(
            "http://127.0.0.1:{port}/reload{}",
            if key.is_empty() {
                String::new()
            } else {
                format!("/{key}")
            }
        ));
    if body.is_some() {
        cmd.args(["--data-binary", "@-"]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, body.unwrap_or_default()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "curl {method} {key}: {:?}",
        out.status
    );
    out.stdout
}

/// The key ID in the header of the object `key` that the embedded store in `data` holds
/// (SPEC 5.1, bytes 8 to 15).
fn stored_key_id(data: &std::path::Path, key: &str) -> String {
    let stored = std::fs::read(data.join("objects").join("reload").join(key)).unwrap();
    hex::encode(&stored[8..16])
}

/// A key rotation reaches a running gateway without a restart: on SIGHUP, and by itself
/// when the key file changes (as Kubernetes updates a mounted Secret); new objects are then
/// sealed under the new key and old ones still read. A broken key file is refused and the
/// keys in use stay. The log is JSON, one object per line, with no secret.
#[test]
fn the_key_file_reloads_on_sighup_and_on_change_and_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log_path = dir.path().join("gateway.log");
    let mut child = embedded_gateway(&dir.path().join("data"), port)
        .args(["--log-format", "json"])
        .env("KURA_ACCESS_KEY_ID", "reload-ak")
        .env("KURA_SECRET_ACCESS_KEY", "reload-secret-0123456789")
        .env_remove("KURA_KEY_PASSPHRASE")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    let data = dir.path().join("data");
    let key_file = data.join("kura-keys.toml");
    curl_s3(port, "PUT", "", None);
    curl_s3(port, "PUT", "before", Some(b"sealed under the first key"));
    let rotate = || {
        let out = Command::new(kura_bin())
            .args(["keys", "rotate", "--key-file"])
            .arg(&key_file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    rotate();
    Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    let log = wait_for_log(&log_path, "key file reloaded", 1, 5);
    assert!(log.contains("\"why\":\"SIGHUP\""), "{log}");
    curl_s3(port, "PUT", "after", Some(b"sealed under the second key"));
    let (first, second) = (
        stored_key_id(&data, "before"),
        stored_key_id(&data, "after"),
    );
    assert_ne!(
        first, second,
        "new objects are sealed under the rotated key"
    );
    assert!(log.contains(&format!("\"active\":\"{second}\"")), "{log}");
    // No signal: the changed bytes are noticed within the poll interval (10 s).
    rotate();
    let log = wait_for_log(&log_path, "key file reloaded", 2, 25);
    assert!(log.contains("\"why\":\"changed\""), "{log}");
    std::fs::write(&key_file, "version = 1\nactive = \"not a key id\"\n").unwrap();
    let log = wait_for_log(&log_path, "key file not reloaded", 1, 25);
    assert!(log.contains("the keys in use stay"), "{log}");
    let ready = http_get(port, "/readyz").unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "still serving: {ready}");
    curl_s3(port, "PUT", "still", Some(b"the keys in use stay"));
    assert_ne!(stored_key_id(&data, "still"), first);
    assert_ne!(
        stored_key_id(&data, "still"),
        second,
        "the change without a signal was taken"
    );
    assert_eq!(
        curl_s3(port, "GET", "before", None),
        b"sealed under the first key"
    );
    assert_eq!(
        curl_s3(port, "GET", "after", None),
        b"sealed under the second key"
    );
    let metrics = http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains("kura_reloads_total{file=\"keys\",result=\"ok\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kura_reloads_total{file=\"keys\",result=\"failed\"} 1"),
        "{metrics}"
    );
    assert!(stop(child).success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    for line in log.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
    assert!(
        log.lines().filter(|l| l.starts_with('{')).count() >= 4,
        "{log}"
    );
    assert!(
        !log.contains("reload-secret-0123456789"),
        "no secret in the log"
    );
}

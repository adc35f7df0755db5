//! `kura init / backup / snapshots / restore` as processes, against a `kura gateway`
//! process on its embedded default.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use kura_testkit::data::pseudo_random;
use kura_testkit::loopdev::Loop;
use kura_testkit::net::free_port;
use kura_testkit::process::{kura_bin, stop, wait_ready};

use crate::gateway::embedded_gateway;

struct Gateway {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            let _ = stop(c);
        }
    }
}

fn gateway() -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = gateway_process(dir.path(), port);
    Gateway {
        child: Some(child),
        port,
        dir,
    }
}

/// A `kura gateway` process on the embedded default in `dir`, serving on `port`.
fn gateway_process(dir: &Path, port: u16) -> Child {
    let mut child = embedded_gateway(dir, port)
        .env("KURA_ACCESS_KEY_ID", "repo-test")
        .env("KURA_SECRET_ACCESS_KEY", "repo-test-secret")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    child
}

/// `kura ARGS` with the repository and the gateway's credentials in the environment.
fn command<S: AsRef<std::ffi::OsStr>>(gw: &Gateway, args: &[S]) -> Command {
    let mut cmd = Command::new(kura_bin());
    cmd.args(args)
        .env("KURA_REPOSITORY", "s3://backups/cluster-a")
        .env("KURA_ENDPOINT", format!("http://127.0.0.1:{}", gw.port))
        .env("KURA_ACCESS_KEY_ID", "repo-test")
        .env("KURA_SECRET_ACCESS_KEY", "repo-test-secret");
    cmd
}

/// `cmd` (its program, arguments and environment) run by `wrapper` (a shell that lowers a
/// limit, `setpriv`), as the wrapper's last arguments.
fn run_by(mut wrapper: Command, cmd: &Command) -> Command {
    wrapper
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))));
    wrapper
}

/// A shell running `cmd` under a soft limit of `n` open files (only the soft one: raising
/// the hard one again would need a privilege).
fn with_soft_open_files(n: u32, cmd: &Command) -> Command {
    let mut sh = Command::new("sh");
    sh.args(["-c", &format!("ulimit -Sn {n} && exec \"$0\" \"$@\"")]);
    run_by(sh, cmd)
}

fn kura(gw: &Gateway, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = command(gw, args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    if let Some(data) = stdin {
        std::io::Write::write_all(&mut pipe, data).unwrap();
    }
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until the files written so far are settled: a backup reads again, whatever its
/// parent says, a file changed within 2 s of the parent's start (FORMAT.md section 9).
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(2_300));
}

fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("etc/app")).unwrap();
    std::fs::write(
        root.join("etc/app/config.yaml"),
        "replicas: 3\n".repeat(1000),
    )
    .unwrap();
    std::fs::write(root.join("etc/empty"), b"").unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24).to_le_bytes()[0])
        .collect();
    std::fs::write(root.join("volume.bin"), big).unwrap();
}

/// A gateway whose repository holds one backup of a [`tree`], and that tree (kept, for
/// comparisons).
fn tree_backed_up() -> (Gateway, tempfile::TempDir) {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    ok(&kura(&gw, &["backup", src.path().to_str().unwrap()], None));
    (gw, src)
}

#[test]
fn init_backup_snapshots_and_restore_through_a_gateway_process() {
    let gw = gateway();
    let out = ok(&kura(&gw, &["init"], None));
    assert!(out.starts_with("created repository"), "{out}");
    let again = kura(&gw, &["init"], None);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    // The repository's grace period (24 h by default) is a floor for every prune.
    let short = kura(&gw, &["prune", "--grace", "1h"], None);
    assert!(!short.status.success());
    let err = String::from_utf8_lossy(&short.stderr);
    assert!(
        err.contains("shorter than this repository's minimum of 86400 s"),
        "{err}"
    );

    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    let out = ok(&kura(
        &gw,
        &["backup", "--tag", "nightly", src.path().to_str().unwrap()],
        None,
    ));
    assert!(out.contains("snapshot") && out.contains("3 files"), "{out}");

    let list = ok(&kura(&gw, &["snapshots", "--json"], None));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["snapshot"]["tags"][0], "nightly");

    let dst = tempfile::tempdir().unwrap();
    let restored = kura(
        &gw,
        &["restore", "latest", dst.path().to_str().unwrap()],
        None,
    );
    ok(&restored);
    // stderr is a pipe here: the summary line only, no progress bar drawing.
    let err = String::from_utf8_lossy(&restored.stderr);
    assert!(err.starts_with("restored snapshot"), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    let name = src.path().file_name().unwrap();
    for f in ["etc/app/config.yaml", "etc/empty", "volume.bin"] {
        assert_eq!(
            std::fs::read(src.path().join(f)).unwrap(),
            std::fs::read(dst.path().join(name).join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn a_stream_goes_in_on_stdin_and_comes_out_on_stdout() {
    let gw = gateway();
    ok(&kura(&gw, &["init", "--chunk-kib", "64"], None));
    let data: Vec<u8> = (0..2_500_000u32)
        .map(|i| (i.wrapping_mul(40_503) >> 7).to_le_bytes()[0])
        .collect();
    ok(&kura(
        &gw,
        &["backup", "--stdin", "--stdin-name", "pg.dump"],
        Some(&data),
    ));
    let out = kura(&gw, &["restore", "latest", "-"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, data);

    // Onto an existing file (as onto a block device): its old bytes are replaced.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("volume.raw");
    std::fs::write(&target, vec![0xAA; 3_000_000]).unwrap();
    ok(&kura(
        &gw,
        &["restore", "latest", target.to_str().unwrap()],
        None,
    ));
    assert_eq!(std::fs::read(&target).unwrap(), data);
}

/// Regression: a one-directory snapshot restored onto an existing file (or to `-`) wrote
/// nothing, truncated the file to 0 bytes, and exited 0 ("restored 0 bytes").
#[test]
fn a_directory_snapshot_onto_a_file_or_stdout_is_refused_and_the_file_kept() {
    let (gw, _src) = tree_backed_up();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious.txt");
    std::fs::write(&target, b"keep me").unwrap();
    let out = kura(&gw, &["restore", "latest", target.to_str().unwrap()], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a file"), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    let out = kura(&gw, &["restore", "latest", "-"], None);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a file"));
}

/// Regression: a restore into a target that held symlinks where the snapshot has a
/// directory or a file wrote through them, outside the target.
#[test]
fn a_restore_replaces_symlinks_in_the_target_instead_of_writing_through_them() {
    use std::os::unix::fs::symlink;
    let (gw, src) = tree_backed_up();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim"), b"untouched").unwrap();
    let dst = tempfile::tempdir().unwrap();
    let root = dst.path().join(src.path().file_name().unwrap());
    std::fs::create_dir(&root).unwrap();
    symlink(outside.path(), root.join("etc")).unwrap();
    symlink(outside.path().join("victim"), root.join("volume.bin")).unwrap();
    ok(&kura(
        &gw,
        &["restore", "latest", dst.path().to_str().unwrap()],
        None,
    ));
    assert_eq!(
        std::fs::read(outside.path().join("victim")).unwrap(),
        b"untouched"
    );
    assert!(
        !outside.path().join("app").exists(),
        "nothing written outside"
    );
    for f in ["etc/app/config.yaml", "volume.bin"] {
        let restored = root.join(f);
        assert!(
            !std::fs::symlink_metadata(&restored)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{f}"
        );
        assert_eq!(
            std::fs::read(&restored).unwrap(),
            std::fs::read(src.path().join(f)).unwrap(),
            "{f}"
        );
    }
    assert!(
        !std::fs::symlink_metadata(root.join("etc"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// A restore into a target whose marker says a restore of another snapshot was stopped
/// part-way: it succeeds, and says that the marker stays and why.
#[test]
fn a_restore_that_leaves_a_stopped_restores_marker_says_so() {
    let (gw, _src) = tree_backed_up();
    let dst = tempfile::tempdir().unwrap();
    let marker = dst.path().join(".kura-restore-unfinished");
    // What a killed whole restore of some other snapshot leaves: a start and no end.
    let stopped = format!("start 00000000000000aa {} whole\n", "0".repeat(64));
    std::fs::write(&marker, &stopped).unwrap();
    let out = kura(
        &gw,
        &["restore", "latest", dst.path().to_str().unwrap()],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(marker.is_file(), "the stopped restore is not made good");
    assert!(
        stderr.contains(".kura-restore-unfinished") && stderr.contains("stopped part-way"),
        "{stderr}"
    );
    assert!(
        std::fs::read_to_string(&marker)
            .unwrap()
            .starts_with(&stopped)
    );
}

/// Regression: a backup that started after a prune had marked packs as unused still
/// reused their blobs, so the next prune, running before that backup had written its
/// snapshot, could delete data the snapshot then named. A backup now stores such blobs
/// again.
#[test]
fn a_backup_relies_on_no_pack_a_prune_has_marked() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let (old, other) = (pseudo_random(300_000, 61), pseudo_random(1_000, 62));
    for data in [&old, &other] {
        ok(&kura(
            &gw,
            &["backup", "--stdin", "--stdin-name", "d", "--tag", "t"],
            Some(data),
        ));
    }
    ok(&kura(&gw, &["forget", "--keep-last", "1"], None));
    let out = ok(&kura(&gw, &["prune"], None));
    assert!(out.contains("marked"), "{out}");
    ok(&kura(
        &gw,
        &["backup", "--stdin", "--stdin-name", "d", "--tag", "t"],
        Some(&old),
    ));
    let list = ok(&kura(&gw, &["snapshots", "--json"], None));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let again = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["snapshot"]["summary"]["bytes_read"] == old.len())
        .expect("the last backup");
    let added = again["snapshot"]["summary"]["bytes_added"]
        .as_u64()
        .unwrap();
    assert!(
        added >= old.len() as u64,
        "the blobs of the marked packs were stored again: {added} bytes added"
    );
    let out = kura(&gw, &["restore", "latest", "-"], None);
    assert!(out.status.success());
    assert_eq!(out.stdout, old);
}

/// Regression: paths with one last name (`/srv/a/data /srv/b/data`), or a stream named
/// `db/app.sql`, made a snapshot that `backup` and `check` called good and `restore`
/// refused whole. They are refused before anything is read.
#[test]
fn names_a_restore_would_refuse_are_refused_by_the_backup() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let src = tempfile::tempdir().unwrap();
    for d in ["a/data", "b/data"] {
        std::fs::create_dir_all(src.path().join(d)).unwrap();
        std::fs::write(src.path().join(d).join("f"), d).unwrap();
    }
    let (a, b) = (src.path().join("a/data"), src.path().join("b/data"));
    let out = kura(
        &gw,
        &["backup", a.to_str().unwrap(), b.to_str().unwrap()],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("would both be"), "{err}");
    let out = kura(
        &gw,
        &["backup", "--stdin", "--stdin-name", "db/app.sql"],
        Some(b"dump"),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a plain file name"));
    let list = ok(&kura(&gw, &["snapshots", "--json"], None));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 0, "no snapshot was made");
}

#[test]
fn a_wrong_endpoint_bad_credentials_or_a_missing_repository_is_one_clear_line() {
    let gw = gateway();
    let missing = kura(&gw, &["snapshots"], None);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("no repository here"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let mut cmd = Command::new(kura_bin());
    let port = free_port();
    let out = cmd
        .args([
            "snapshots",
            "--repo",
            "s3://backups/x",
            "--endpoint",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(["--access-key-id", "repo-test"])
        .env("KURA_SECRET_ACCESS_KEY", "repo-test-secret")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the gateway"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // The right gateway, the wrong secret.
    let out = Command::new(kura_bin())
        .args([
            "snapshots",
            "--repo",
            "s3://backups/cluster-a",
            "--endpoint",
        ])
        .arg(format!("http://127.0.0.1:{}", gw.port))
        .args(["--access-key-id", "repo-test"])
        .env("KURA_SECRET_ACCESS_KEY", "not-the-secret")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("refused the credentials"), "{err}");
}

#[test]
fn incremental_backup_ls_forget_prune_and_check() {
    let gw = gateway();
    ok(&kura(
        &gw,
        &["init", "--pack-mib", "4", "--grace", "0s"],
        None,
    ));
    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    settle();
    let path = src.path().to_str().unwrap();
    ok(&kura(&gw, &["backup", path], None));
    std::fs::write(src.path().join("etc/app/config.yaml"), "replicas: 5\n").unwrap();
    let out = ok(&kura(&gw, &["backup", path], None));
    assert!(
        out.contains("(2 unchanged, not read)"),
        "the newest snapshot of the same paths is the parent: {out}"
    );

    let name = src
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let listing = ok(&kura(&gw, &["ls", "latest", &format!("{name}/etc")], None));
    assert!(
        listing.contains(&format!("/{name}/etc/app/config.yaml")),
        "{listing}"
    );
    assert!(!listing.contains("volume.bin"), "{listing}");

    let out = ok(&kura(&gw, &["forget", "--keep-last", "1"], None));
    assert!(out.contains("kept 1 snapshots, removed 1"), "{out}");
    let first = ok(&kura(&gw, &["prune", "--grace", "0s"], None));
    let second = ok(&kura(&gw, &["prune", "--grace", "0s"], None));
    assert!(first.starts_with("marked 1 unused packs"), "{first}");
    assert!(second.contains("deleted 1 packs"), "{second}");
    let out = ok(&kura(&gw, &["check", "--read-data"], None));
    assert!(out.starts_with("no errors"), "{out}");

    let dst = tempfile::tempdir().unwrap();
    ok(&kura(
        &gw,
        &["restore", "latest", dst.path().to_str().unwrap()],
        None,
    ));
    assert_eq!(
        std::fs::read(dst.path().join(&name).join("etc/app/config.yaml")).unwrap(),
        b"replicas: 5\n"
    );
}

/// A backup killed with SIGKILL after its first index object: the repository stays
/// check-clean with no new snapshot, and the next backup reuses what was indexed.
#[test]
fn a_backup_killed_midway_leaves_a_clean_repository_and_its_uploads_are_reused() {
    let gw = gateway();
    ok(&kura(
        &gw,
        &["init", "--chunk-kib", "64", "--pack-mib", "1"],
        None,
    ));
    let src = tempfile::tempdir().unwrap();
    for i in 0..6u64 {
        // Incompressible, so that packs fill and the first index comes well before the end.
        std::fs::write(
            src.path().join(format!("part-{i}.bin")),
            pseudo_random(6_000_000, i),
        )
        .unwrap();
    }
    let index_dir = gw.dir.path().join("objects/backups/cluster-a/index");
    let mut child = command(&gw, &["backup", src.path().to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut killed = false;
    for _ in 0..6000 {
        if std::fs::read_dir(&index_dir).is_ok_and(|mut d| d.next().is_some()) {
            child.kill().unwrap();
            killed = true;
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the backup finished before it could be killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.wait().unwrap();
    assert!(killed, "no index object appeared");

    let list = ok(&kura(&gw, &["snapshots", "--json"], None));
    assert_eq!(list.trim(), "[]", "a killed backup leaves no snapshot");
    let out = ok(&kura(&gw, &["check", "--read-data"], None));
    assert!(out.starts_with("no errors"), "{out}");
    let out = ok(&kura(
        &gw,
        &["backup", "--json", src.path().to_str().unwrap()],
        None,
    ));
    let snap: serde_json::Value = serde_json::from_str(&out).unwrap();
    let read = snap["snapshot"]["summary"]["bytes_read"].as_u64().unwrap();
    let added = snap["snapshot"]["summary"]["bytes_added"].as_u64().unwrap();
    assert!(
        added < read - (10 << 20),
        "the indexed part was reused: {added} of {read} bytes new"
    );
}

/// With neither --endpoint nor --upstream, each command starts the embedded default's
/// gateway in-process on --data-dir: no server needed, and the data is ciphertext.
#[test]
fn without_an_endpoint_the_embedded_default_runs_in_process() {
    let data = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(kura_bin())
            .args(args)
            .args(["--repo", "s3://local/repo", "--data-dir"])
            .arg(data.path())
            .env_remove("KURA_ENDPOINT")
            .env_remove("KURA_ACCESS_KEY_ID")
            .env_remove("KURA_SECRET_ACCESS_KEY")
            .output()
            .unwrap()
    };
    let init = run(&["init"]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    assert!(String::from_utf8_lossy(&init.stderr).contains("NEW KEY FILE"));
    assert!(data.path().join("kura-keys.toml").exists());

    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("secret.txt"),
        "the plaintext nobody may see\n".repeat(100),
    )
    .unwrap();
    ok(&run(&["backup", src.path().to_str().unwrap()]));
    let dst = tempfile::tempdir().unwrap();
    ok(&run(&["restore", "latest", dst.path().to_str().unwrap()]));
    let name = src.path().file_name().unwrap();
    assert_eq!(
        std::fs::read(dst.path().join(name).join("secret.txt")).unwrap(),
        std::fs::read(src.path().join("secret.txt")).unwrap()
    );
    let mut stack = vec![data.path().join("objects")];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.to_string_lossy().contains(".s3s") {
                files += 1;
                let b = std::fs::read(&p).unwrap();
                assert!(
                    !b.windows(13).any(|w| w == b"the plaintext"),
                    "{}",
                    p.display()
                );
            }
        }
    }
    assert!(files >= 4, "config, packs, index, snapshot: {files}");
}

/// Everything the environment gave in the other tests, from a config file instead: the
/// secret from a file (a mounted Kubernetes secret), nothing on the command line but
/// `--config`; a flag still wins over the file.
#[test]
fn a_config_file_names_the_repository_endpoint_and_credential() {
    let gw = gateway();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "repo-test-secret\n").unwrap();
    let config = dir.path().join("kura.toml");
    std::fs::write(
        &config,
        format!(
            "repository = \"s3://from-config/repo\"\nendpoint = \"http://127.0.0.1:{}\"\naccess_key_id = \"repo-test\"\nsecret_access_key_file = {:?}\n",
            gw.port,
            secret.display().to_string()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(kura_bin())
            .args(args)
            .arg("--config")
            .arg(&config)
            .env_remove("KURA_REPOSITORY")
            .env_remove("KURA_ENDPOINT")
            .env_remove("KURA_ACCESS_KEY_ID")
            .env_remove("KURA_SECRET_ACCESS_KEY")
            .env("HOME", dir.path())
            .output()
            .unwrap()
    };
    let out = ok(&run(&["init"]));
    assert!(out.contains("s3://from-config/repo"), "{out}");
    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    ok(&run(&["backup", src.path().to_str().unwrap()]));
    let list = ok(&run(&["snapshots", "--json"]));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    // --repo on the command line wins: that repository does not exist.
    let other = run(&["snapshots", "--repo", "s3://from-config/elsewhere"]);
    assert!(!other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("s3://from-config/elsewhere"), "{err}");
}

/// A path that cannot be read (here: gone by the time the backup looks; as root nothing
/// else is unreadable) is reported, the rest is saved, the snapshot says it is incomplete
/// and the exit status is non-zero.
#[test]
fn an_unreadable_path_makes_an_incomplete_snapshot_and_a_failing_exit() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    let gone = src.path().join("vanished");
    let out = kura(
        &gw,
        &[
            "backup",
            src.path().to_str().unwrap(),
            gone.to_str().unwrap(),
        ],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("vanished") && err.contains("incomplete"),
        "{err}"
    );
    let list = ok(&kura(&gw, &["snapshots", "--json"], None));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let snap = &list[0]["snapshot"];
    assert_eq!(snap["incomplete"], true);
    assert!(snap["errors"][0].as_str().unwrap().contains("vanished"));
    assert_eq!(snap["summary"]["files"], 3, "the readable files were saved");
    let listed = ok(&kura(&gw, &["ls", "latest"], None));
    assert!(listed.contains("volume.bin"), "{listed}");
}

/// One `kura backup` process per node, three at once, while `kura prune` runs beside them
/// (marking only: its grace period protects what the backups are uploading); afterwards a
/// prune past the grace deletes the garbage, the repository checks clean and every node's
/// snapshot restores byte for byte.
#[test]
fn concurrent_backup_processes_beside_prune_leave_every_snapshot_whole() {
    let gw = gateway();
    ok(&kura(
        &gw,
        &["init", "--pack-mib", "4", "--grace", "0s"],
        None,
    ));
    // Garbage for prune: a snapshot with a unique file, then forgotten.
    let old = tempfile::tempdir().unwrap();
    std::fs::write(old.path().join("gone.bin"), pseudo_random(3 << 20, 99)).unwrap();
    let old_path = old.path().to_str().unwrap();
    ok(&kura(&gw, &["backup", "--host", "old", old_path], None));
    std::fs::remove_file(old.path().join("gone.bin")).unwrap();
    std::fs::write(old.path().join("kept.txt"), "still here").unwrap();
    ok(&kura(&gw, &["backup", "--host", "old", old_path], None));
    let out = ok(&kura(&gw, &["forget", "--keep-last", "1"], None));
    assert!(out.contains("removed 1"), "{out}");

    let nodes: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for (i, dir) in nodes.iter().enumerate() {
        tree(dir.path());
        std::fs::write(
            dir.path().join("node.bin"),
            pseudo_random(4 << 20, i as u64),
        )
        .unwrap();
    }
    let spawn = |args: Vec<String>| {
        command(&gw, &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let running: Vec<Child> = nodes
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            spawn(vec![
                "backup".into(),
                "--host".into(),
                format!("node-{i}"),
                dir.path().to_str().unwrap().into(),
            ])
        })
        .collect();
    let prune = spawn(vec!["prune".into(), "--grace".into(), "1h".into()]);
    for child in running {
        ok(&child.wait_with_output().unwrap());
    }
    let marked = ok(&prune.wait_with_output().unwrap());
    assert!(
        marked.contains("deleted 0 packs") && !marked.starts_with("marked 0 "),
        "beside the backups prune only marks (the forgotten snapshot's packs): {marked}"
    );

    let past_grace = ok(&kura(&gw, &["prune", "--grace", "0s"], None));
    assert!(
        !past_grace.contains("deleted 0 packs"),
        "past the grace the marked packs go: {past_grace}"
    );
    let out = ok(&kura(&gw, &["check", "--read-data"], None));
    assert!(out.starts_with("no errors"), "{out}");

    let list = ok(&kura(&gw, &["snapshots", "--json"], None));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(
        list.as_array().unwrap().len(),
        4,
        "old's newest and one per node"
    );
    for (i, dir) in nodes.iter().enumerate() {
        let id = list
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["snapshot"]["host"] == format!("node-{i}"))
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let dst = tempfile::tempdir().unwrap();
        ok(&kura(
            &gw,
            &["restore", &id, dst.path().to_str().unwrap()],
            None,
        ));
        let name = dir.path().file_name().unwrap();
        for f in ["node.bin", "volume.bin", "etc/app/config.yaml"] {
            assert!(
                std::fs::read(dir.path().join(f)).unwrap()
                    == std::fs::read(dst.path().join(name).join(f)).unwrap(),
                "node-{i}: {f} differs"
            );
        }
    }
}

/// `--stdin-from-command`: the command's output is the stream, and the snapshot is written
/// only when the command exits 0 (issue 22 item 11: `pg_dump | kura backup --stdin` stored
/// a truncated dump as complete when pg_dump died).
#[test]
fn a_command_stream_makes_a_snapshot_only_when_the_command_succeeds() {
    let gw = gateway();
    ok(&kura(&gw, &["init", "--chunk-kib", "64"], None));
    let src = tempfile::tempdir().unwrap();
    let dump = src.path().join("dump.sql");
    let data = pseudo_random(2_500_000, 11);
    std::fs::write(&dump, &data).unwrap();
    let out = ok(&kura(
        &gw,
        &[
            "backup",
            "--stdin-name",
            "app.sql",
            "--stdin-from-command",
            "--",
            "sh",
            "-c",
            &format!("cat {}; echo dumped >&2", dump.display()),
        ],
        None,
    ));
    assert!(out.contains("snapshot") && out.contains("1 files"), "{out}");
    let restored = kura(&gw, &["restore", "latest", "-"], None);
    assert!(restored.status.success());
    assert_eq!(restored.stdout, data);
    let snaps = |gw: &Gateway| -> usize {
        let list = ok(&kura(gw, &["snapshots", "--json"], None));
        serde_json::from_str::<serde_json::Value>(&list)
            .unwrap()
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(snaps(&gw), 1);

    // A command that dies part-way: its output so far is no snapshot.
    let failed = kura(
        &gw,
        &[
            "backup",
            "--stdin-from-command",
            "--",
            "sh",
            "-c",
            "head -c 3000000 /dev/urandom; echo pg_dump: lost the connection >&2; exit 3",
        ],
        None,
    );
    assert!(!failed.status.success());
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("pg_dump: lost the connection"), "{err}");
    assert!(err.contains("exited with status 3"), "{err}");
    assert_eq!(snaps(&gw), 1, "a failed command leaves no snapshot");

    // One killed by a signal, likewise.
    let killed = kura(
        &gw,
        &[
            "backup",
            "--stdin-from-command",
            "--",
            "sh",
            "-c",
            "head -c 1000000 /dev/urandom; kill -9 $$",
        ],
        None,
    );
    assert!(!killed.status.success());
    let err = String::from_utf8_lossy(&killed.stderr);
    assert!(err.contains("signal 9"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(snaps(&gw), 1, "a killed command leaves no snapshot");
    let out = ok(&kura(&gw, &["check", "--read-data"], None));
    assert!(out.starts_with("no errors"), "{out}");
}

/// The gateway killed (SIGKILL, as a node failure or an OOM kill does) and started again
/// on the same port and directory, some seconds later, two seconds into a backup, as a
/// rolling update does: the backup waits for it, finishes, and the repository is whole (issue 22 item 13).
#[test]
fn a_backup_rides_out_a_gateway_restart() {
    let mut gw = gateway();
    ok(&kura(&gw, &["init", "--pack-mib", "4"], None));
    let data = std::sync::Arc::new(pseudo_random(200 << 20, 13));
    let mut child = command(&gw, &["backup", "--stdin", "--stdin-name", "big.raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    // The first half before the kill, the rest after it: the backup cannot finish
    // before the gateway goes, however fast this machine is.
    let (killed, after_kill) = std::sync::mpsc::channel::<()>();
    let feed = {
        let data = data.clone();
        std::thread::spawn(move || {
            let half = data.len() / 2;
            std::io::Write::write_all(&mut pipe, &data[..half])?;
            let _ = after_kill.recv();
            std::io::Write::write_all(&mut pipe, &data[half..])
        })
    };
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the backup ended before the gateway restarted"
    );
    let mut old = gw.child.take().unwrap();
    old.kill().unwrap();
    old.wait().unwrap();
    killed.send(()).unwrap();
    // Down for some seconds, as a pod is while it is rescheduled and started (the S3
    // SDK's own retries give up after 3 attempts in about as many seconds).
    std::thread::sleep(std::time::Duration::from_secs(6));
    gw.child = Some(gateway_process(gw.dir.path(), gw.port));
    let written = feed.join().unwrap();
    let out = child.wait_with_output().unwrap();
    let out = ok(&out);
    written.unwrap();
    assert!(out.contains("snapshot"), "{out}");

    let out = ok(&kura(&gw, &["check", "--read-data"], None));
    assert!(out.starts_with("no errors"), "{out}");
    let restored = kura(&gw, &["restore", "latest", "-"], None);
    assert!(restored.status.success());
    assert!(restored.stdout == *data, "the restore matches");
}

/// Regression: one node backs up two volumes; `restore latest` onto a device wrote
/// whichever volume was backed up last. `latest` now resolves within `--host`, `--path`
/// and `--tag`, and refuses, naming each volume, when they leave more than one.
#[test]
fn restore_latest_refuses_two_volumes_and_takes_the_one_path_names() {
    let gw = gateway();
    ok(&kura(&gw, &["init", "--block-kib", "64"], None));
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("vol-a.img"), dir.path().join("vol-b.img"));
    std::fs::write(&a, pseudo_random(300_000, 1)).unwrap();
    std::fs::write(&b, pseudo_random(300_000, 2)).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    ok(&kura(
        &gw,
        &["backup", "--host", "node-1", "--block", a],
        None,
    ));
    ok(&kura(
        &gw,
        &["backup", "--host", "node-1", "--block", b],
        None,
    ));
    let target = dir.path().join("device.raw");
    std::fs::write(&target, vec![0xAA; 300_000]).unwrap();
    let t = target.to_str().unwrap();

    let out = kura(&gw, &["restore", "latest", t], None);
    assert!(!out.status.success(), "restored one of two volumes");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(a) && err.contains(b), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), vec![0xAA; 300_000]);

    ok(&kura(&gw, &["restore", "latest", "--path", a, t], None));
    assert!(std::fs::read(&target).unwrap() == pseudo_random(300_000, 1));
}

/// `forget` keeps each volume apart, says per group in JSON what a dry run would keep
/// (and by which rule) and remove, and applies the filters and `--group-by` it is given.
#[test]
fn forget_keeps_each_volume_and_a_dry_run_says_why_in_json() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    for (name, seed) in [("a", 1), ("b", 2), ("a", 3), ("b", 4)] {
        let args = [
            "backup",
            "--host",
            "node-1",
            "--stdin",
            "--stdin-name",
            name,
        ];
        ok(&kura(&gw, &args, Some(&pseudo_random(2_000, seed))));
    }
    let count = |gw: &Gateway| {
        let out = ok(&kura(gw, &["snapshots", "--json"], None));
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap()
            .as_array()
            .map_or_else(|| panic!("{out}"), Vec::len)
    };
    assert_eq!(count(&gw), 4);

    let dry = ok(&kura(
        &gw,
        &["forget", "--keep-last", "1", "--dry-run", "--json"],
        None,
    ));
    let v: serde_json::Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(v["dry_run"], true, "{dry}");
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "one group per volume: {dry}");
    for g in groups {
        assert_eq!(g["group"]["host"], "node-1", "{dry}");
        assert_eq!(g["keep"].as_array().unwrap().len(), 1, "{dry}");
        assert_eq!(g["keep"][0]["reasons"][0], "last", "{dry}");
        assert_eq!(g["remove"].as_array().unwrap().len(), 1, "{dry}");
    }
    assert_eq!(count(&gw), 4, "a dry run deletes nothing");

    let out = ok(&kura(
        &gw,
        &[
            "forget",
            "--keep-last",
            "1",
            "--host",
            "node-1",
            "--path",
            "-:a",
        ],
        None,
    ));
    assert!(out.contains("kept 1 snapshots, removed 1"), "{out}");
    assert_eq!(count(&gw), 3, "b's two are not a's filter's");

    let out = ok(&kura(
        &gw,
        &[
            "forget",
            "--keep-last",
            "1",
            "--group-by",
            "host",
            "--dry-run",
        ],
        None,
    ));
    assert!(out.contains("host node-1:"), "{out}");
    assert!(
        out.contains("would remove 2"),
        "one group for the host: {out}"
    );
    ok(&kura(
        &gw,
        &[
            "forget",
            "--keep-within",
            "1d",
            "--keep-tag",
            "x,y",
            "--dry-run",
        ],
        None,
    ));

    let bad = kura(
        &gw,
        &["forget", "--keep-last", "1", "--group-by", "volume"],
        None,
    );
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("none of host, paths, tags"), "{err}");
    let none = kura(&gw, &["forget", "--dry-run"], None);
    assert!(
        !none.status.success(),
        "no rule is refused, even in a dry run"
    );
    assert_eq!(count(&gw), 3);
}

/// A device restore opens the device exclusively: refused while something holds it (as
/// a mount does) or when it is smaller than the image, the device untouched; otherwise
/// it says what it overwrites and writes the image.
#[test]
fn a_device_restore_refuses_a_held_or_small_device_and_names_what_it_overwrites() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let gw = gateway();
    ok(&kura(&gw, &["init", "--block-kib", "64"], None));
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("vol.img");
    std::fs::write(&image, pseudo_random(300_000, 7)).unwrap();
    let args = [
        "backup",
        "--host",
        "node-1",
        "--block",
        image.to_str().unwrap(),
    ];
    ok(&kura(&gw, &args, None));

    let (small, large) = (dir.path().join("small"), dir.path().join("large"));
    std::fs::write(&small, vec![0xAA; 256 << 10]).unwrap();
    std::fs::write(&large, vec![0xAA; 512 << 10]).unwrap();
    let (Some(small_dev), Some(large_dev)) = (Loop::attach(&small), Loop::attach(&large)) else {
        eprintln!("no loop device can be made here (needs root and losetup): not run");
        return;
    };

    let out = kura(&gw, &["restore", "latest", &small_dev.0], None);
    assert!(!out.status.success(), "restored onto a device too small");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("less than the image's 300000"), "{err}");

    // An exclusive holder, as a mounted filesystem or a device-mapper table is.
    let holder = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::EXCL.bits().cast_signed())
        .open(&large_dev.0)
        .unwrap();
    let out = kura(&gw, &["restore", "latest", &large_dev.0], None);
    assert!(!out.status.success(), "restored onto a held device");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use"), "{err}");
    drop(holder);
    let untouched = |f: &Path, len: usize| std::fs::read(f).unwrap() == vec![0xAA; len];
    assert!(untouched(&small, 256 << 10) && untouched(&large, 512 << 10));

    let out = kura(&gw, &["restore", "latest", &large_dev.0], None);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "overwriting {} (524288 bytes) with 300000 bytes",
            large_dev.0
        )) && err.contains("node-1"),
        "{err}"
    );
    drop((small_dev, large_dev));
    let written = std::fs::read(&large).unwrap();
    assert!(written[..300_000] == pseudo_random(300_000, 7));
}

/// `backup --parent latest` is the newest snapshot of this host and these paths (as
/// restic's), not another volume's that happens to be newer.
#[test]
fn parent_latest_is_the_newest_of_the_same_paths() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    tree(a.path());
    tree(b.path());
    settle();
    let (a, b) = (a.path().to_str().unwrap(), b.path().to_str().unwrap());
    ok(&kura(&gw, &["backup", "--host", "node-1", a], None));
    ok(&kura(&gw, &["backup", "--host", "node-1", b], None));
    let out = ok(&kura(
        &gw,
        &["backup", "--host", "node-1", "--parent", "latest", a],
        None,
    ));
    assert!(
        out.contains("(3 unchanged, not read)"),
        "a's own parent: {out}"
    );
}

/// Issue 26 from the command line: `--changed` with `--parent latest` (the newest of the
/// `--source-id`, whatever the device's path and the host), a verifying run that finds a block the
/// extents file missed (exit 1, the snapshot saved), and `--only-changed-since`.
#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one night-by-night scenario, read top to bottom"
)]
fn changed_block_backups_and_an_incremental_restore_run_from_the_command_line() {
    const MIB: usize = 1 << 20;
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let mut mon = vec![0u8; 4 * MIB];
    mon[..MIB].copy_from_slice(&pseudo_random(MIB, 1));
    mon[2 * MIB..3 * MIB].copy_from_slice(&pseudo_random(MIB, 2));
    let mut tue = mon.clone();
    tue[2 * MIB..3 * MIB].copy_from_slice(&pseudo_random(MIB, 3));
    std::fs::write(p("mon.img"), &mon).unwrap();
    std::fs::write(p("tue.img"), &tue).unwrap();
    std::fs::write(p("delta"), "2097152 1048576\n").unwrap();
    std::fs::write(p("nothing"), "# no changes\n").unwrap();
    let json = |out: &str| serde_json::from_str::<serde_json::Value>(out).unwrap();
    let base = ["backup", "--json", "--block", "--source-id", "vg0/vol"];
    let run = |more: &[&str]| kura(&gw, &[&base[..], more].concat(), None);

    let first = json(&ok(&run(&["--host", "node-1", &p("mon.img")])));
    let out = run(&["--changed", &p("delta"), &p("tue.img")]);
    assert!(!out.status.success(), "--changed without --parent");
    // From another host (a CronJob's pod is named anew each night): latest is the
    // source's, whatever the host and the path.
    let second = json(&ok(&run(&[
        "--host",
        "node-2",
        "--parent",
        "latest",
        "--changed",
        &p("delta"),
        &p("tue.img"),
    ])));
    let snap = &second["snapshot"];
    assert_eq!(
        snap["parent"], first["id"],
        "latest of the source, not of the path or host"
    );
    assert_eq!(snap["summary"]["bytes_read"], MIB);
    assert_eq!(snap["block"]["read"], "changed:list");

    // Block 0 changes, and an extents file says nothing did: the verifying run catches it.
    let mut wed = tue.clone();
    wed[..MIB].copy_from_slice(&pseudo_random(MIB, 4));
    std::fs::write(p("wed.img"), &wed).unwrap();
    let out = run(&[
        "--parent",
        "latest",
        "--changed",
        &p("nothing"),
        "--verify-every",
        "1",
        &p("wed.img"),
    ]);
    assert!(
        !out.status.success(),
        "a verifying run that found a difference fails"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1048576 bytes in 1 extents (the first at byte 0) differed"),
        "{err}"
    );
    let third = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        third["snapshot"]["block"]["mismatched"],
        serde_json::json!([[0, MIB]])
    );

    // `restore ID target.img --only-changed-since SINCE` onto Monday's image.
    let onto_monday = |id: &str, since: &str| {
        std::fs::write(p("target.img"), &mon).unwrap();
        let args = [
            "restore",
            id,
            &p("target.img"),
            "--only-changed-since",
            since,
        ];
        kura(&gw, &args, None)
    };
    let (id1, id3) = (first["id"].as_str().unwrap(), third["id"].as_str().unwrap());
    let out = onto_monday(id3, id1);
    ok(&out);
    assert!(
        std::fs::read(p("target.img")).unwrap() == wed,
        "Wednesday's image"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2097152 of 4194304 bytes written"), "{err}");
}

/// Found by review (2026-12-08), from the command line: a standby one backup behind
/// (Sunday's image, told it holds Monday's) passed the spot check, 16 samples over 255
/// shared blocks missing the one Monday changed, and took Tuesday's changes over Sunday's
/// image. `restore` looks up Monday's parent, and the check reads the blocks Monday changed.
#[test]
fn an_incremental_restore_onto_a_standby_one_backup_behind_is_refused() {
    const BLOCK: usize = 64 << 10;
    let gw = gateway();
    ok(&kura(&gw, &["init", "--block-kib", "64"], None));
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let sun = pseudo_random(256 * BLOCK, 81);
    let mut mon = sun.clone();
    mon[7 * BLOCK..8 * BLOCK].copy_from_slice(&pseudo_random(BLOCK, 82));
    let mut tue = mon.clone();
    tue[..BLOCK].copy_from_slice(&pseudo_random(BLOCK, 83));
    let mut ids: Vec<String> = Vec::new();
    for (name, image) in [("sun", &sun), ("mon", &mon), ("tue", &tue)] {
        std::fs::write(p(name), image).unwrap();
        let img = p(name);
        let mut args = vec!["backup", "--json", "--block", "--source-id", "vg0/vol"];
        if !ids.is_empty() {
            args.extend(["--parent", "latest"]);
        }
        args.push(&img);
        let out: serde_json::Value = serde_json::from_str(&ok(&kura(&gw, &args, None))).unwrap();
        ids.push(out["id"].as_str().unwrap().to_owned());
    }
    std::fs::write(p("standby.img"), &sun).unwrap();
    let standby = p("standby.img");
    let args = [
        "restore",
        &ids[2],
        &standby,
        "--only-changed-since",
        &ids[1],
    ];
    let out = kura(&gw, &args, None);
    assert!(!out.status.success(), "the standby holds Sunday's image");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not hold that snapshot"), "{err}");
    assert!(std::fs::read(&standby).unwrap() == sun, "nothing written");
}

/// Before: a restore held each directory it was writing into open, and up to about 2,000
/// small files queued from as many directories: under the common soft limit of 1,024
/// open files (here 64), a tree of many small directories ran out (`EMFILE`) and the
/// restore stopped. kura raises its soft limit to the hard one, as Go programs (restic)
/// do.
#[test]
fn a_restore_of_many_small_directories_runs_under_a_low_open_file_limit() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let src = tempfile::tempdir().unwrap();
    for d in 0..600 {
        let dir = src.path().join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), format!("file {d}")).unwrap();
    }
    ok(&kura(&gw, &["backup", src.path().to_str().unwrap()], None));
    let target = tempfile::tempdir().unwrap();
    let restore = command(&gw, &["restore", "latest", target.path().to_str().unwrap()]);
    let out = with_soft_open_files(64, &restore).output().unwrap();
    ok(&out);
    let name = src.path().file_name().unwrap();
    for d in [0, 299, 599] {
        let f = target.path().join(name).join(format!("d{d:03}/f"));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), format!("file {d}"));
    }
}

/// `kura_repo::MAX_DEPTH`: the deepest directory level a backup walks and a restore
/// writes (the source's top is the first).
const MAX_DEPTH: usize = 4_096;

/// Opens the directory `depth` levels of `d` below `root`, through descriptors (the path
/// grows past `PATH_MAX`), making them where `make`.
fn nested(root: &Path, depth: usize, make: bool) -> rustix::fd::OwnedFd {
    use rustix::fs::{Mode, OFlags, mkdirat, openat};
    let mut dir = openat(rustix::fs::CWD, root, OFlags::DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..depth {
        if make {
            mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        }
        dir = openat(&dir, "d", OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    dir
}

/// Before: the backup walk recursed once per directory level on a blocking thread's
/// 2 MiB stack, so a tree nested a thousand levels deep (any user can make one)
/// overflowed it and killed every backup of the tree (SIGABRT, no snapshot); the
/// restore's walk and `check`, on the main thread, overflowed below 4,000. They now walk
/// `MAX_DEPTH` levels, and a deeper directory, or one with a longer path than
/// `MAX_PATH_BYTES`, is an error that names it.
#[test]
fn a_tree_nested_four_thousand_levels_deep_is_backed_up_and_restored() {
    use rustix::fs::{Mode, OFlags, openat};
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let src = tempfile::tempdir().unwrap();
    let bottom = nested(src.path(), MAX_DEPTH - 1, true);
    let f = openat(
        &bottom,
        "f",
        OFlags::CREATE | OFlags::WRONLY,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&f, b"at the bottom").unwrap();
    let out = kura(&gw, &["backup", src.path().to_str().unwrap()], None);
    assert!(
        out.status.code().is_some(),
        "the backup died on a signal: {:?}",
        out.status
    );
    ok(&out);
    // `check` walks the snapshot by recursion, on the command thread's stack, and refuses
    // a directory deeper than `MAX_DEPTH` (`kura_repo::Depth`, as `ls`, `diff` and
    // `repair snapshots` do): the deepest a backup makes is not that.
    ok(&kura(&gw, &["check"], None));
    let target = tempfile::tempdir().unwrap();
    ok(&kura(
        &gw,
        &["restore", "latest", target.path().to_str().unwrap()],
        None,
    ));
    let restored = nested(
        &target.path().join(src.path().file_name().unwrap()),
        MAX_DEPTH - 1,
        false,
    );
    let f = openat(&restored, "f", OFlags::RDONLY, Mode::empty()).unwrap();
    let mut buf = [0u8; 64];
    let n = rustix::io::read(&f, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"at the bottom");

    // A backup of `path` that exits 1 and says `why`.
    let refused = |path: &Path, why: &str| {
        let out = kura(&gw, &["backup", path.to_str().unwrap()], None);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(why), "{said}");
    };
    rustix::fs::mkdirat(&bottom, "deeper", Mode::from_raw_mode(0o755)).unwrap();
    settle();
    refused(
        src.path(),
        "/deeper: nested more than 4096 directories deep",
    );

    // A path longer than `kura_repo::MAX_PATH_BYTES` (32 KiB) is refused the same way.
    let long = tempfile::tempdir().unwrap();
    let name = "n".repeat(250);
    let mut dir = openat(
        rustix::fs::CWD,
        long.path(),
        OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    for _ in 0..140 {
        rustix::fs::mkdirat(&dir, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        dir = openat(&dir, name.as_str(), OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    refused(long.path(), "its path is longer than 32768 bytes");
}

/// Before: a restore removed what stood at an entry's name before it made the device node,
/// FIFO, socket or symlink there, so a create that failed (a device node without the
/// privilege to make one) lost the file that was there. The entry is made under a
/// temporary name and renamed over it.
#[test]
fn a_device_node_that_cannot_be_made_leaves_the_file_at_its_name() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    ok(&kura(&gw, &["backup", "/dev/null"], None));
    let dst = tempfile::tempdir().unwrap();
    std::fs::write(dst.path().join("null"), b"what was there").unwrap();
    let home = tempfile::tempdir().unwrap();
    let restore = command(&gw, &["restore", "latest", dst.path().to_str().unwrap()]);
    let mut unprivileged = if rustix::process::geteuid().is_root() {
        // As nobody: root could make the node.
        for d in [dst.path(), home.path()] {
            rustix::fs::chown(d, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
        }
        rustix::fs::chown(
            dst.path().join("null"),
            Some(rustix::fs::Uid::from_raw(65534)),
            None,
        )
        .unwrap();
        let mut setpriv = Command::new("setpriv");
        setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        run_by(setpriv, &restore)
    } else {
        restore
    };
    let out = unprivileged.env("HOME", home.path()).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("null"), "the skipped node is named: {said}");
    assert_eq!(
        std::fs::read(dst.path().join("null")).unwrap(),
        b"what was there",
        "{said}"
    );
}

/// A one-file restore stopped by SIGTERM (Ctrl-C, a pod deleted) leaves the file it was
/// replacing as it was, and removes the image-sized file it was writing beside it.
#[test]
fn a_one_file_restore_stopped_by_a_signal_leaves_the_target_and_no_temporary_file() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let image = pseudo_random(96 << 20, 91);
    ok(&kura(
        &gw,
        &["backup", "--stdin", "--stdin-name", "disk.img"],
        Some(&image),
    ));
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("disk.img");
    std::fs::write(&target, b"the image that was there").unwrap();
    let mut child = command(&gw, &["restore", "latest", target.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the file beside the target exists, the restore is under way.
    let beside = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != "disk.img")
            .count()
    };
    let started = std::time::Instant::now();
    while beside() == 0 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the restore ended first"
        );
        assert!(
            started.elapsed().as_secs() < 60,
            "no file beside the target"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("terminated"), "{said}");
    assert_eq!(std::fs::read(&target).unwrap(), b"the image that was there");
    assert_eq!(beside(), 0, "nothing left beside the target");
}

/// The program a `--stdin-from-command` backup runs keeps the open-file limit kura was
/// given: kura raises its own soft limit for restores, and a child would inherit it (some
/// programs loop over every descriptor up to it).
#[test]
fn a_command_streams_program_keeps_the_open_file_limit_kura_was_given() {
    let gw = gateway();
    ok(&kura(&gw, &["init"], None));
    let backup = command(
        &gw,
        &[
            "backup",
            "--stdin-from-command",
            "--stdin-name",
            "limit.txt",
            "--",
            "sh",
            "-c",
            "ulimit -Sn",
        ],
    );
    let out = with_soft_open_files(512, &backup).output().unwrap();
    ok(&out);
    let out = kura(&gw, &["restore", "latest", "-"], None);
    assert_eq!(ok(&out), "512\n");
}

//! A repository on testkit's fault-injecting upstream (`KillOnStore`), reached by `kura`
//! commands that each start their gateway in-process (`upstream` in a config file), so
//! that the process the upstream kills is the whole of one command. What the crash and
//! repair tests share: running commands, killing one at a chosen write, looking at the
//! stored objects, and comparing restores with what was backed up.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use kura_testkit::fault::{FaultyUpstream, Op, Trigger};
use kura_testkit::process::kura_bin;
use kura_testkit::upstream::{UP_AK, UP_SK};

const BUCKET: &str = "backups";
const PREFIX: &str = "cluster-a";

pub struct Repo {
    pub up: FaultyUpstream,
    config: PathBuf,
    /// The key file and the config file.
    _etc: tempfile::TempDir,
}

impl Repo {
    /// A new repository, `kura init` given `init_args`.
    pub fn init(init_args: &[&str]) -> Repo {
        let up = FaultyUpstream::start();
        let etc = tempfile::tempdir().unwrap();
        let key_file = etc.path().join("keys.toml");
        let out = Command::new(kura_bin())
            .args(["keys", "generate", "--out"])
            .arg(&key_file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = etc.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "repository = \"s3://{BUCKET}/{PREFIX}\"\nupstream = \"{}\"\npath_style = true\nkey_file = \"{}\"\n",
                up.url(),
                key_file.display()
            ),
        )
        .unwrap();
        let repo = Repo {
            up,
            config,
            _etc: etc,
        };
        repo.ok(&[&["init"], init_args].concat());
        repo
    }

    /// `kura ARGS` against this repository. The in-process gateway signs for the upstream
    /// with the credential from the environment (the AWS chain).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(kura_bin());
        cmd.args(args)
            .env("KURA_CONFIG", &self.config)
            .env("AWS_ACCESS_KEY_ID", UP_AK)
            .env("AWS_SECRET_ACCESS_KEY", UP_SK)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::null());
        for var in [
            "KURA_REPOSITORY",
            "KURA_ENDPOINT",
            "KURA_ACCESS_KEY_ID",
            "KURA_SECRET_ACCESS_KEY",
            "KURA_DATA_DIR",
            "KURA_KEY_FILE",
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    pub fn kura(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `kura ARGS`, which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kura(args);
        assert!(
            out.status.success(),
            "kura {args:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kura check --read-data`, which must exit 0 and find nothing.
    pub fn check_clean(&self) {
        let out = self.ok(&["check", "--read-data"]);
        assert!(out.starts_with("no errors"), "{out}");
    }

    /// Runs `kura ARGS` until the upstream kills it right after the `nth` `op` on a key
    /// under `kind/` of the repository (`data`, `index`, `snapshots`, `prune`) was carried
    /// out (a GET: before it is answered); returns that key.
    pub fn killed_after(&self, op: Op, kind: &str, nth: u32, args: &[&str]) -> String {
        self.up.faults.arm(Trigger {
            op,
            key_prefix: format!("{PREFIX}/{kind}/"),
            nth,
        });
        let child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        self.up.faults.target(child.id());
        let out = child.wait_with_output().unwrap();
        let fired = self.up.faults.fired();
        self.up.faults.disarm();
        assert_eq!(
            out.status.signal(),
            Some(9),
            "kura {args:?} was to be killed after {op:?} number {nth} under {kind}/, but ended \
             with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let key = fired.expect("killed by the upstream");
        // The write was carried out before the kill: that is the case under test (a read
        // leaves the object as it was).
        let stored = self.up.stored_path(BUCKET, &key).exists();
        assert_eq!(stored, op != Op::Delete, "{key} after its {op:?}");
        key
    }

    /// The names of the stored objects under `kind/` (packs without their `XX/`).
    pub fn objects(&self, kind: &str) -> Vec<String> {
        let dir = self.up.stored_path(BUCKET, &format!("{PREFIX}/{kind}"));
        if !dir.exists() {
            return Vec::new();
        }
        let mut names: Vec<String> = kura_testkit::walk::files_under(&dir)
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Where the upstream keeps `kind/name`'s body (`data/XX/ID` for packs).
    pub fn object_path(&self, kind: &str, name: &str) -> PathBuf {
        let key = if kind == "data" {
            format!("{PREFIX}/data/{}/{name}", &name[..2])
        } else {
            format!("{PREFIX}/{kind}/{name}")
        };
        self.up.stored_path(BUCKET, &key)
    }

    /// Makes every object under `kind/` look `by` older to the repository: its
    /// Last-Modified is the file's mtime. This is how a test lets a lease's lifetime (five
    /// minutes) pass without waiting for it.
    pub fn age(&self, kind: &str, by: Duration) {
        for name in self.objects(kind) {
            let file = std::fs::File::options()
                .write(true)
                .open(self.object_path(kind, &name))
                .unwrap();
            file.set_modified(SystemTime::now() - by).unwrap();
        }
    }

    /// The IDs of the snapshots, oldest first.
    pub fn snapshots(&self) -> Vec<String> {
        let list = self.ok(&["snapshots", "--json"]);
        let list: serde_json::Value = serde_json::from_str(&list).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Restores `snapshot` and returns the files under `name` (the backed-up directory's
    /// last component) as [`files`] does.
    pub fn restored(&self, snapshot: &str, name: &str) -> BTreeMap<String, Vec<u8>> {
        let dst = tempfile::tempdir().unwrap();
        self.ok(&["restore", snapshot, dst.path().to_str().unwrap()]);
        files(&dst.path().join(name))
    }
}

/// Every file under `root`, by its path relative to `root`, with its bytes.
pub fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    kura_testkit::walk::files_under(root)
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&f).unwrap();
            (rel, bytes)
        })
        .collect()
}

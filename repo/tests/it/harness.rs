//! The repository tests' environment: a real upstream (the embedded default's store, from
//! `kura-testkit`), a real gateway in front of it, and storage for a repository at
//! `s3://repo/PREFIX` through that gateway.

use kura_gateway::server::Running;
use kura_repo::{S3Location, S3Storage};
use kura_testkit::upstream::Upstream;

pub use kura_testkit::data::pseudo_random;

const AK: &str = "repo-ak";
const SK: &str = "repo-secret";
pub const BUCKET: &str = "repo";

pub struct Env {
    pub upstream: Upstream,
    pub gateway: Running,
    keyring: std::sync::Arc<kura_keys::Keyring>,
}

impl Env {
    pub async fn start() -> Env {
        // The embedded default's store, not plain s3s-fs: concurrent backups storing the
        // same content-addressed pack race on one key (testkit's `Upstream::local_dir`).
        let upstream = Upstream::local_dir().await;
        let keyring = kura_testkit::gateway::keyring();
        let gateway = start_gateway(&upstream, &keyring, 0).await;
        let env = Env {
            upstream,
            gateway,
            keyring,
        };
        env.storage("").ensure_bucket().await.unwrap();
        env
    }

    /// Another gateway in front of the same upstream with the same keys, on `port` of
    /// 127.0.0.1 (as the same gateway restarted there would be).
    pub async fn gateway_on(&self, port: u16) -> Running {
        start_gateway(&self.upstream, &self.keyring, port).await
    }

    pub fn location(&self, prefix: &str) -> S3Location {
        S3Location {
            endpoint: format!("http://{}", self.gateway.addr),
            bucket: BUCKET.into(),
            prefix: prefix.into(),
            access_key: AK.into(),
            secret_key: SK.into(),
        }
    }

    /// Storage for the repository at `s3://repo/PREFIX`, through the gateway.
    pub fn storage(&self, prefix: &str) -> S3Storage {
        S3Storage::new(&self.location(prefix))
    }

    /// Client GetObject requests the gateway has answered so far (from its `/metrics`).
    pub async fn gets_answered(&self) -> u64 {
        let port = self.gateway.addr.port();
        tokio::task::spawn_blocking(move || {
            kura_testkit::metrics::sum(port, "kura_requests_total{operation=\"GetObject\"")
        })
        .await
        .unwrap()
    }

    /// Every stored object file under the upstream's bucket directory (ciphertext).
    pub fn stored_files(&self) -> Vec<std::path::PathBuf> {
        kura_testkit::walk::files_under(&self.upstream.bucket_dir(BUCKET))
    }

    /// The stored objects of kind `kind` (`data`, `session`, `snapshots`...) of the
    /// repository at `prefix`.
    pub fn objects_under(&self, prefix: &str, kind: &str) -> Vec<std::path::PathBuf> {
        let needle = format!("/{prefix}/{kind}/");
        self.stored_files()
            .into_iter()
            .filter(|f| f.to_string_lossy().contains(&needle))
            .collect()
    }
}

/// A gateway in front of `upstream` sealing under `keyring`, on `port` of 127.0.0.1 (0:
/// any).
async fn start_gateway(
    upstream: &Upstream,
    keyring: &std::sync::Arc<kura_keys::Keyring>,
    port: u16,
) -> Running {
    let mut config = kura_testkit::gateway::loopback_config(
        upstream,
        keyring.clone(),
        vec![kura_testkit::gateway::credential(AK, SK)],
    );
    config.listen.set_port(port);
    kura_gateway::server::start(config).await.unwrap()
}

/// Stores `bytes` as a snapshot object under their ID, as a backup would write it (for
/// tests that make snapshots by hand), and returns the ID.
pub async fn store_snapshot(
    repo: &kura_repo::Repository<S3Storage>,
    bytes: Vec<u8>,
) -> kura_repo::Id {
    let id = repo.config().object_id(&bytes);
    kura_repo::Storage::put(
        repo.storage(),
        kura_repo::FileType::Snapshot,
        &id.to_hex(),
        bytes.into(),
    )
    .await
    .unwrap();
    id
}

/// Longer than a file's timestamps must lie before a backup's start for the next backup
/// to take the file as unchanged (2 s, FORMAT.md section 9), with room for a slow machine.
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(2_300);

/// Waits until files written so far are settled: a backup started after this may be the
/// parent that lets the next backup skip them.
pub fn settle() {
    std::thread::sleep(SETTLE);
}

/// A storage call, for [`Hook`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put,
    Create,
    Get,
    GetRange,
    Exists,
    List,
    Delete,
    Modified,
}

/// What a fault-injecting [`Hooked`] storage does before each call (wait, count, fail).
pub trait Hook: Send + Sync + 'static {
    /// Runs before `op` on `(ft, name)`; an error is returned instead of the call's result.
    fn before(
        &self,
        op: Op,
        ft: kura_repo::FileType,
        name: &str,
    ) -> impl std::future::Future<Output = kura_repo::Result<()>> + Send;
}

/// `n` directories `d000`, `d001`... under `root`, each holding one small file `f`: a
/// tree whose trees are many and small, for the tests of reading them in runs.
pub fn dirs_of_one_file(root: &std::path::Path, n: u64) {
    for d in 0..n {
        let dir = root.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), pseudo_random(100, d)).unwrap();
    }
}

/// Counting hook: the range GETs of packs.
#[derive(Default)]
pub struct RangeGets(pub std::sync::atomic::AtomicUsize);

impl Hook for std::sync::Arc<RangeGets> {
    async fn before(&self, op: Op, ft: kura_repo::FileType, _name: &str) -> kura_repo::Result<()> {
        if (op, ft) == (Op::GetRange, kura_repo::FileType::Pack) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}

/// How long a slow read takes in [`InFlight::wait`]: as a far store's (B2, S3) answer.
pub const DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// For fault-injecting hooks: reads that each take [`DELAY`], and how many were in flight
/// at once.
#[derive(Default)]
pub struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    pub most: std::sync::atomic::AtomicUsize,
}

impl InFlight {
    /// Waits [`DELAY`], counted as in flight meanwhile.
    pub async fn wait(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::time::sleep(DELAY).await;
        self.now.fetch_sub(1, SeqCst);
    }
}

/// Fault-injecting wrapper: a real storage with a [`Hook`] run before every call, for
/// faults no real server produces on demand (a process paused mid-call, a lost request).
pub struct Hooked<S, H> {
    pub inner: S,
    pub hook: H,
}

impl<S: kura_repo::Storage, H: Hook> kura_repo::Storage for Hooked<S, H> {
    async fn put(
        &self,
        ft: kura_repo::FileType,
        name: &str,
        data: bytes::Bytes,
    ) -> kura_repo::Result<()> {
        self.hook.before(Op::Put, ft, name).await?;
        self.inner.put(ft, name, data).await
    }
    async fn create(
        &self,
        ft: kura_repo::FileType,
        name: &str,
        data: bytes::Bytes,
    ) -> kura_repo::Result<bool> {
        self.hook.before(Op::Create, ft, name).await?;
        self.inner.create(ft, name, data).await
    }
    async fn get(&self, ft: kura_repo::FileType, name: &str) -> kura_repo::Result<bytes::Bytes> {
        self.hook.before(Op::Get, ft, name).await?;
        self.inner.get(ft, name).await
    }
    async fn get_range(
        &self,
        ft: kura_repo::FileType,
        name: &str,
        offset: u64,
        len: u64,
    ) -> kura_repo::Result<bytes::Bytes> {
        self.hook.before(Op::GetRange, ft, name).await?;
        self.inner.get_range(ft, name, offset, len).await
    }
    async fn exists(&self, ft: kura_repo::FileType, name: &str) -> kura_repo::Result<bool> {
        self.hook.before(Op::Exists, ft, name).await?;
        self.inner.exists(ft, name).await
    }
    async fn list(&self, ft: kura_repo::FileType) -> kura_repo::Result<Vec<(String, u64)>> {
        self.hook.before(Op::List, ft, "").await?;
        self.inner.list(ft).await
    }
    async fn delete(&self, ft: kura_repo::FileType, name: &str) -> kura_repo::Result<()> {
        self.hook.before(Op::Delete, ft, name).await?;
        self.inner.delete(ft, name).await
    }
    async fn modified(
        &self,
        ft: kura_repo::FileType,
        name: &str,
    ) -> kura_repo::Result<Option<i64>> {
        self.hook.before(Op::Modified, ft, name).await?;
        self.inner.modified(ft, name).await
    }
}

/// Fault-injecting hook: runs `action` once, before the first call of `op` on `ft` for
/// which `ready` holds (something done to the files while a backup or restore waits on
/// the storage, at a known point of its walk).
pub struct OnFirst {
    op: Op,
    ft: kura_repo::FileType,
    ready: Box<dyn Fn() -> bool + Send + Sync>,
    action: Box<dyn Fn() + Send + Sync>,
    /// Held while the action runs, so that no call passes before it finished.
    done: std::sync::Mutex<bool>,
}

impl OnFirst {
    pub fn new(
        op: Op,
        ft: kura_repo::FileType,
        ready: impl Fn() -> bool + Send + Sync + 'static,
        action: impl Fn() + Send + Sync + 'static,
    ) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            op,
            ft,
            ready: Box::new(ready),
            action: Box::new(action),
            done: std::sync::Mutex::new(false),
        })
    }

    /// Whether the action ran.
    pub fn done(&self) -> bool {
        *self.done.lock().unwrap()
    }
}

impl Hook for std::sync::Arc<OnFirst> {
    async fn before(&self, op: Op, ft: kura_repo::FileType, _name: &str) -> kura_repo::Result<()> {
        if op == self.op && ft == self.ft {
            let mut done = self.done.lock().unwrap();
            if !*done && (self.ready)() {
                (self.action)();
                *done = true;
            }
        }
        Ok(())
    }
}

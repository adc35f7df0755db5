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
}

impl Env {
    pub async fn start() -> Env {
        // The embedded default's store, not plain s3s-fs: concurrent backups storing the
        // same content-addressed pack race on one key (testkit's `Upstream::local_dir`).
        let upstream = Upstream::local_dir().await;
        let config = kura_testkit::gateway::loopback_config(
            &upstream,
            kura_testkit::gateway::keyring(),
            vec![kura_testkit::gateway::credential(AK, SK)],
        );
        let gateway = kura_gateway::server::start(config).await.unwrap();
        let env = Env { upstream, gateway };
        env.storage("").ensure_bucket().await.unwrap();
        env
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
}

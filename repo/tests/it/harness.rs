//! A real upstream (s3s-fs's store, served by kura's LocalDir over HTTP), a real gateway in
//! front of it, and an `S3Storage` for a repository at `s3://repo/PREFIX` through that gateway.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use kura_gateway::config::{BucketScope, ClientCredential, GatewayConfig, UpstreamConfig};
use kura_gateway::server::Running;
use kura_keys::{Cipher, Keyring};
use kura_repo::{S3Location, S3Storage};

const UP_AK: &str = "upstream-ak";
const UP_SK: &str = "upstream-secret";
const AK: &str = "repo-ak";
const SK: &str = "repo-secret";
pub const BUCKET: &str = "repo";

pub struct Env {
    pub upstream_dir: tempfile::TempDir,
    pub gateway: Running,
}

async fn serve_upstream(dir: &std::path::Path) -> SocketAddr {
    // s3s-fs's files behind kura's LocalDir, as the embedded default serves them: plain
    // s3s-fs replaces an object's body and sidecars one rename at a time with no lock, so
    // concurrent backups storing the same content-addressed pack could pair one's body
    // with another's sidecars (upstream/key_locks.rs).
    let fs = kura_gateway::upstream::LocalDir::new(dir).unwrap();
    let mut b = s3s::service::S3ServiceBuilder::new(fs);
    b.set_auth(s3s::auth::SimpleAuth::from_single(UP_AK, UP_SK));
    let service = b.build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(
                conn.serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned(),
            );
        }
    });
    addr
}

impl Env {
    pub async fn start() -> Env {
        let upstream_dir = tempfile::tempdir().unwrap();
        let addr = serve_upstream(upstream_dir.path()).await;
        let config = GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            admin_listen: None,
            upstream: UpstreamConfig::S3 {
                url: format!("http://{addr}"),
                region: "us-east-1".into(),
                path_style: true,
                ca_bundle: None,
                credentials: Some((UP_AK.into(), UP_SK.into())),
                timeout: kura_gateway::config::DEFAULT_UPSTREAM_TIMEOUT,
            },
            keyring: Arc::new(Keyring::generate("test".into()).unwrap()),
            cipher: Cipher::Aes256Gcm,
            credentials: vec![ClientCredential {
                access_key: AK.into(),
                secret: SK.into(),
                buckets: BucketScope::All,
            }],
            tls: None,
            virtual_host_domain: None,
        };
        let gateway = kura_gateway::server::start(config).await.unwrap();
        let env = Env {
            upstream_dir,
            gateway,
        };
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

    pub fn storage(&self, prefix: &str) -> S3Storage {
        S3Storage::new(&self.location(prefix))
    }

    /// Client GetObject requests the gateway has answered so far (from its `/metrics`).
    pub async fn gets_answered(&self) -> u64 {
        let addr = self.gateway.addr;
        tokio::task::spawn_blocking(move || {
            use std::io::{Read as _, Write as _};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
                .unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            text.lines()
                .filter(|l| l.starts_with("kura_requests_total{operation=\"GetObject\""))
                .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
                .sum()
        })
        .await
        .unwrap()
    }

    /// Every stored object file under the upstream's bucket directory (ciphertext).
    pub fn stored_files(&self) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.upstream_dir.path().join(BUCKET)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p);
                }
            }
        }
        out
    }
}

/// Reproducible incompressible bytes.
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s.to_le_bytes()[3]
        })
        .collect()
}

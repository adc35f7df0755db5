//! A real S3 server in the test's own process, over HTTP on loopback: s3s-fs on a temporary
//! directory, or the embedded default's store (`LocalDir`, s3s-fs's files behind kura's
//! per-key serialisation). Tests point a gateway (or a client, to look underneath it) here.

use std::net::SocketAddr;
use std::path::PathBuf;

use hyper_util::rt::{TokioExecutor, TokioIo};

/// The access key the upstream accepts (the gateway's own upstream credential in tests).
pub const UP_AK: &str = "upstream-ak";
/// The secret of [`UP_AK`].
pub const UP_SK: &str = "upstream-secret-key";

/// An S3 server on loopback, serving until the test's runtime ends, and the directory it
/// stores in (removed when this is dropped).
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it stores in: `DIR/BUCKET/KEY` holds each object's body.
    pub dir: tempfile::TempDir,
}

impl Upstream {
    /// Plain s3s-fs on a new temporary directory.
    ///
    /// # Panics
    /// When the directory or the listener cannot be made.
    pub async fn s3s_fs() -> Upstream {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let fs = s3s_fs::FileSystem::new(dir.path()).expect("s3s-fs on a new directory");
        Upstream {
            addr: serve(fs).await,
            dir,
        }
    }

    /// The embedded default's store (`LocalDir`) on a new temporary directory. Tests whose
    /// writers race on one key use it: plain s3s-fs replaces a body and its sidecars one
    /// rename at a time with no lock, so two writers could pair one's body with the
    /// other's sidecars.
    ///
    /// # Panics
    /// When the directory or the listener cannot be made.
    pub async fn local_dir() -> Upstream {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store =
            kura_gateway::upstream::LocalDir::new(dir.path()).expect("LocalDir on a new directory");
        Upstream {
            addr: serve(store).await,
            dir,
        }
    }

    /// `http://ADDR`, for a client or a gateway's upstream URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where the upstream stores `bucket/key`'s body.
    #[must_use]
    pub fn stored_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.dir.path().join(bucket).join(key)
    }

    /// The directory of `bucket`.
    #[must_use]
    pub fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.dir.path().join(bucket)
    }
}

/// Serves `store` as S3 with the credential [`UP_AK`]/[`UP_SK`] on a new loopback port, in a
/// task of the current runtime; returns the address.
///
/// # Panics
/// When the listener cannot be bound.
pub async fn serve(store: impl s3s::S3) -> SocketAddr {
    let mut b = s3s::service::S3ServiceBuilder::new(store);
    b.set_auth(s3s::auth::SimpleAuth::from_single(UP_AK, UP_SK));
    let service = b.build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding a loopback port");
    let addr = listener.local_addr().expect("a bound address");
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

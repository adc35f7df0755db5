//! The conformance harness's default upstream: s3s-fs on a directory, served over HTTP on
//! loopback as its own process, with SigV4 auth.
//!
//! It serves the store of kura's embedded default (`kura_gateway::upstream::LocalDir`):
//! s3s-fs's own `FileSystem`, with two differences from the `s3s-fs` binary, both making
//! it answer as S3 does: GetObject reads in 1 MiB pieces (s3s-fs: 4 KiB, about 80 MB/s
//! here), and a key that names a directory is 404 on HEAD/GET and a no-op on DELETE
//! (s3s-fs: 500, which rclone and the gateway retry for minutes).
//!
//! With `--b2-shaped`, it refuses what Backblaze B2 refuses (`b2_shaped.rs`), as the
//! harness's `--upstream b2-shaped` does.
//!
//! Usage: `s3s-fs-upstream --listen 127.0.0.1:PORT --access-key AK --secret-key SK
//! [--b2-shaped] DIR`.

mod b2_shaped;

use anyhow::{Context, Result, bail};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kura_gateway::upstream::LocalDir;

#[tokio::main]
async fn main() -> Result<()> {
    let (mut listen, mut ak, mut sk, mut dir) = (None, None, None, None);
    let mut b2 = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--listen" => listen = it.next(),
            "--access-key" => ak = it.next(),
            "--secret-key" => sk = it.next(),
            "--b2-shaped" => b2 = Some(b2_shaped::B2Shaped::default()),
            flag if flag.starts_with("--") => bail!("unknown flag {flag}"),
            _ => dir = Some(arg),
        }
    }
    let dir = std::path::PathBuf::from(dir.context("the data directory is required")?);
    std::fs::create_dir_all(&dir)?;
    let store = LocalDir::new(&dir).map_err(anyhow::Error::msg)?;
    let mut builder = s3s::service::S3ServiceBuilder::new(store);
    builder.set_auth(s3s::auth::SimpleAuth::from_single(
        ak.context("--access-key is required")?,
        sk.context("--secret-key is required")?,
    ));
    let service = builder.build();
    let listener = tokio::net::TcpListener::bind(listen.context("--listen is required")?).await?;
    let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, _) = accepted?;
                // Without it, small responses wait out the client's delayed ACK (40 ms).
                socket.set_nodelay(true)?;
                if let Some(rules) = &b2 {
                    let (rules, inner) = (rules.clone(), service.clone());
                    let svc = hyper::service::service_fn(move |req| {
                        let (rules, inner) = (rules.clone(), inner.clone());
                        async move { rules.serve(req, inner).await }
                    });
                    tokio::spawn(conn.serve_connection(TokioIo::new(socket), svc).into_owned());
                } else {
                    let c = conn.serve_connection(TokioIo::new(socket), service.clone()).into_owned();
                    tokio::spawn(c);
                }
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

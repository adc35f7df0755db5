//! The accept loop: one per listener, each connection served by hyper (HTTP/1.1, behind
//! TLS when configured) with time limits on request heads and handshakes, and the graceful
//! shutdown that stops accepting and drains in-flight requests.

use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::route::App;

/// How long a shutdown waits for in-flight requests.
const DRAIN: Duration = Duration::from_secs(30);

/// How long a connection may take to send a request's head (and an idle keep-alive
/// connection may wait for its next one) before it is closed: sockets that send nothing
/// must not pile up until the gateway runs out of file descriptors.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause after a failed `accept` (out of file descriptors, say), so that the loop does
/// not spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `listener` until `stop` changes, then drains its connections (up to [`DRAIN`]).
pub(super) async fn accept_loop(
    listener: TcpListener,
    app: App,
    tls: Option<TlsAcceptor>,
    admin_only: bool,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    // HTTP/1.1 only: S3 clients speak nothing else to an S3 endpoint (TLS here offers no
    // ALPN), and so hyper's header timer runs from the first moment; the auto builder
    // would first wait, without a limit, for bytes that tell HTTP/1 from HTTP/2.
    let mut conn = ConnBuilder::new(TokioExecutor::new()).http1_only();
    conn.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (socket, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        // A response's head and a short body go out as separate writes; with Nagle on,
        // the second waits for the client's delayed ACK (40 ms on Linux).
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |req| app.clone().handle(req, admin_only));
        match &tls {
            None => {
                let c = conn
                    .serve_connection(TokioIo::new(socket), service)
                    .into_owned();
                let c = graceful.watch(c);
                tokio::spawn(async move {
                    if let Err(e) = c.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let conn = conn.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(socket))
                        .await
                        .unwrap_or_else(|_| {
                            Err(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                "TLS handshake took too long",
                            ))
                        }) {
                        Ok(stream) => {
                            let c = conn
                                .serve_connection(TokioIo::new(stream), service)
                                .into_owned();
                            if let Err(e) = watcher.watch(c).await {
                                tracing::debug!(%peer, error = %e, "connection ended with an error");
                            }
                        }
                        Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    }
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within {DRAIN:?}; closing them");
    }
}

//! The accept loop: one per listener, each connection served by hyper (HTTP/1.1, behind
//! TLS when configured) with time limits on request heads, handshakes and a client that
//! stops reading (`idle.rs`); a cap on connections served at once, beyond which a client is
//! told to slow down; and the graceful shutdown that stops accepting and drains in-flight
//! requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use super::idle::IdleWrites;
use super::route::{App, error_and_close};
use crate::config::Limits;
use crate::metrics::Metrics;

/// How long a shutdown waits for in-flight requests.
const DRAIN: Duration = Duration::from_secs(30);

/// How long a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection beyond the cap may take to send the request it is refused.
const REFUSED_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// What a client beyond the cap is told: retry after this many seconds.
const RETRY_AFTER_SECS: &str = "1";

/// The pause after a failed `accept` (out of file descriptors, say), so that the loop does
/// not spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A connection's place in the count, given back when the connection ends.
struct Slot {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    refused: Option<Arc<AtomicUsize>>,
    metrics: Metrics,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(r) = &self.refused {
            r.fetch_sub(1, Ordering::Relaxed);
        }
        self.metrics.connection(false);
    }
}

/// The answer to every request on a connection beyond the cap: 503 SlowDown, as S3 says
/// it when a client should back off, with `Retry-After`; then the connection closes.
fn slow_down() -> Response<s3s::Body> {
    let mut r = error_and_close(
        StatusCode::SERVICE_UNAVAILABLE,
        "SlowDown",
        "the gateway serves as many connections as it may; retry shortly",
    );
    r.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static(RETRY_AFTER_SECS),
    );
    r
}

/// Answers the one request of a connection beyond the cap with [`slow_down`]. Plain HTTP
/// only: over TLS the handshake would cost more than the connection is worth, so such a
/// connection is closed unanswered.
fn refuse(socket: TcpStream, slot: Slot) {
    let mut conn = hyper::server::conn::http1::Builder::new();
    conn.timer(TokioTimer::new())
        .header_read_timeout(REFUSED_HEAD_TIMEOUT)
        .keep_alive(false);
    let service =
        hyper::service::service_fn(|_req| async { Ok::<_, std::convert::Infallible>(slow_down()) });
    tokio::spawn(async move {
        let _slot = slot;
        let _ = conn.serve_connection(TokioIo::new(socket), service).await;
    });
}

/// Serves `listener` until `stop` changes, then drains its connections (up to [`DRAIN`]).
pub(super) async fn accept_loop(
    listener: TcpListener,
    app: App,
    tls: Option<Arc<ArcSwap<TlsAcceptor>>>,
    admin_only: bool,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Connections beyond the cap being told to slow down; as many again are closed
    // unanswered, so that a flood cannot hold file descriptors through the refusals either.
    let refusing = Arc::new(AtomicUsize::new(0));
    // HTTP/1.1 only: S3 clients speak nothing else to an S3 endpoint (TLS here offers no
    // ALPN), and so hyper's header timer runs from the first moment; the auto builder
    // would first wait, without a limit, for bytes that tell HTTP/1 from HTTP/2.
    let mut conn = ConnBuilder::new(TokioExecutor::new()).http1_only();
    conn.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout);
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
        let metrics = app.metrics.clone();
        metrics.connection(true);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            metrics.connection_refused();
            let already = refusing.fetch_add(1, Ordering::Relaxed);
            let slot = Slot {
                _permit: None,
                refused: Some(refusing.clone()),
                metrics: metrics.clone(),
            };
            if tls.is_none() && already < limits.max_connections {
                refuse(socket, slot);
            } else {
                drop(socket);
                drop(slot);
            }
            continue;
        };
        let slot = Slot {
            _permit: Some(permit),
            refused: None,
            metrics: metrics.clone(),
        };
        let socket = IdleWrites::new(socket, limits.idle_timeout, metrics);
        let app = app.clone();
        let service = hyper::service::service_fn(move |req| app.clone().handle(req, admin_only));
        match &tls {
            None => {
                let c = conn
                    .serve_connection(TokioIo::new(socket), service)
                    .into_owned();
                let c = graceful.watch(c);
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = c.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            Some(acceptor) => {
                // The certificate in use now (`reload.rs` may replace it).
                let acceptor = TlsAcceptor::clone(&acceptor.load());
                let conn = conn.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let _slot = slot;
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

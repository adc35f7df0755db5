//! Idle timeouts on what a client owes a connection. hyper limits the wait for a request
//! head; this file limits the two other waits: for the next bytes of a request body
//! ([`IdleBody`]) and for room to write a response the client stopped reading
//! ([`IdleWrites`]). Each timer runs only while the gateway wants something of the client
//! and is kept waiting, so a request that is slow because the upstream is slow never
//! counts against its client.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::metrics::Metrics;

/// One timer, armed when a wait starts and disarmed when it ends.
struct Waiting {
    limit: Duration,
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl Waiting {
    fn new(limit: Duration) -> Self {
        Self {
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }

    /// After the inner poll answered `Pending`: whether the wait has now lasted the limit.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.armed {
            self.timer.as_mut().reset(Instant::now() + self.limit);
            self.armed = true;
        }
        self.timer.as_mut().poll(cx).is_ready()
    }

    fn done(&mut self) {
        self.armed = false;
    }
}

/// The error a connection or body ends with when its client kept it waiting too long.
#[derive(Debug, thiserror::Error)]
#[error("the client {0} for {1:?}")]
pub(super) struct Idle(&'static str, Duration);

/// A request body whose client must send its next bytes within the idle timeout.
pub(super) struct IdleBody {
    body: Incoming,
    waiting: Waiting,
    metrics: Metrics,
}

impl IdleBody {
    pub(super) fn new(body: Incoming, limit: Duration, metrics: Metrics) -> Self {
        Self {
            body,
            waiting: Waiting::new(limit),
            metrics,
        }
    }
}

impl Body for IdleBody {
    type Data = Bytes;
    type Error = s3s::StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting.done();
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending if this.waiting.expired(cx) => {
                this.metrics.connection_timed_out();
                let limit = this.waiting.limit;
                Poll::Ready(Some(Err(Idle("sent no bytes of the body", limit).into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket whose writes may wait for the client to read for at most the
/// idle timeout; then the write fails and hyper closes the connection.
pub(super) struct IdleWrites<S> {
    inner: S,
    waiting: Waiting,
    metrics: Metrics,
}

impl<S> IdleWrites<S> {
    pub(super) fn new(inner: S, limit: Duration, metrics: Metrics) -> Self {
        Self {
            inner,
            waiting: Waiting::new(limit),
            metrics,
        }
    }

    /// `Pending` from the socket, or the timeout's error once the wait lasted too long.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        if self.waiting.expired(cx) {
            self.metrics.connection_timed_out();
            let idle = Idle("read none of the response", self.waiting.limit);
            return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, idle)));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleWrites<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleWrites<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.waiting.done();
                Poll::Ready(r)
            }
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                this.waiting.done();
                Poll::Ready(r)
            }
            Poll::Pending => this.pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.waiting.done();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

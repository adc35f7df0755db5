//! An upstream GET body that stops arriving is cut. The attempt limit of `timeouts.rs` ends
//! when a GET's headers arrive, and a body may take as long as its reader takes, so what is
//! limited here is silence: the time the gateway waits for the upstream's next bytes while
//! someone downstream wants them. The body is polled only when its reader has room, so a
//! slow client never counts as a stalled upstream.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use s3s::stream::{ByteStream, RemainingLength};
use s3s::{StdError, dto::StreamingBlob};
use tokio::time::{Instant, Sleep};

use crate::metrics::Metrics;

/// The error a stalled body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the upstream sent no bytes of the object for {0:?}")]
pub(crate) struct Stalled(Duration);

/// `body`, cut with [`Stalled`] once the upstream leaves a wanted read waiting for `limit`.
pub(super) fn guard(body: StreamingBlob, limit: Duration, metrics: Metrics) -> StreamingBlob {
    StreamingBlob::new(Guarded {
        body,
        limit,
        timer: Box::pin(tokio::time::sleep(limit)),
        armed: false,
        metrics,
    })
}

struct Guarded {
    body: StreamingBlob,
    limit: Duration,
    /// One timer for the body's life, re-armed whenever a read starts waiting.
    timer: Pin<Box<Sleep>>,
    armed: bool,
    metrics: Metrics,
}

impl Stream for Guarded {
    type Item = Result<Bytes, StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_next(cx) {
            Poll::Ready(item) => {
                this.armed = false;
                Poll::Ready(item)
            }
            Poll::Pending => {
                if !this.armed {
                    this.armed = true;
                    this.timer.as_mut().reset(Instant::now() + this.limit);
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    this.metrics.upstream_error("GetObject", "BodyStalled");
                    tracing::warn!(limit = ?this.limit, "upstream body stalled; cutting the response");
                    return Poll::Ready(Some(Err(Box::new(Stalled(this.limit)))));
                }
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.body.size_hint()
    }
}

impl ByteStream for Guarded {
    fn remaining_length(&self) -> RemainingLength {
        self.body.remaining_length()
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;

    use super::*;

    fn blob(
        s: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    ) -> StreamingBlob {
        StreamingBlob::wrap(s)
    }

    #[tokio::test(start_paused = true)]
    async fn silence_longer_than_the_limit_cuts_the_body() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
        let metrics = Metrics::default();
        let mut body = guard(blob(rx), Duration::from_secs(5), metrics.clone());
        tx.unbounded_send(Ok(Bytes::from_static(b"ab"))).unwrap();
        assert_eq!(body.next().await.unwrap().unwrap().as_ref(), b"ab");
        // Waits shorter than the limit, each ended by bytes, add up to more than it.
        for _ in 0..3 {
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(4)).await;
                tx.unbounded_send(Ok(Bytes::from_static(b"c"))).unwrap();
            });
            assert_eq!(body.next().await.unwrap().unwrap().as_ref(), b"c");
        }
        let started = Instant::now();
        let err = body.next().await.unwrap().unwrap_err();
        assert!(err.to_string().contains("no bytes"), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(metrics.render().contains(
            "kura_upstream_errors_total{operation=\"GetObject\",code=\"BodyStalled\"} 1"
        ));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_waits_is_not_a_stall() {
        let chunks =
            futures::stream::iter([Ok(Bytes::from_static(b"ab")), Ok(Bytes::from_static(b"cd"))]);
        let mut body = guard(blob(chunks), Duration::from_secs(1), Metrics::default());
        assert_eq!(body.next().await.unwrap().unwrap().as_ref(), b"ab");
        tokio::time::sleep(Duration::from_mins(1)).await;
        assert_eq!(body.next().await.unwrap().unwrap().as_ref(), b"cd");
        assert!(body.next().await.is_none());
    }
}

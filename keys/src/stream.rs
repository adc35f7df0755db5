//! Async adapters: any [`Transform`] over a stream of byte chunks, as the gateway's bodies
//! (s3s, aws-sdk-s3, hyper) and tokio readers all provide.

use std::io;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use futures::{FutureExt as _, Stream, StreamExt, stream};

use crate::format::SEGMENT_SIZE;
use crate::transform::Transform;
use crate::{Error, Output, Result};

/// Largest slice of input handed to the transform at once, so an output chunk stays a few
/// segments long even when the input arrives in huge chunks.
const SLICE: usize = 4 * SEGMENT_SIZE;

/// Output is handed on once it reaches this size, or when no more input is ready. Upstreams
/// and sockets deliver small pieces (s3s-fs: 4 KiB); passing each on alone costs a task
/// wake-up and a syscall per piece, which dominated the gateway's CPU time.
const BATCH: usize = 4 * SEGMENT_SIZE;

/// Room for one batch: it ends with a feed of up to `SLICE` input, and a sealer's output
/// exceeds its input by a header and a prefix and tag per segment.
const OUT_CAPACITY: usize = BATCH + SLICE + SEGMENT_SIZE;

/// Spare output buffers a stream keeps. Each batch is handed on as the buffer it was
/// written into, which comes back to the shelf when the consumer (hyper's write queue,
/// which holds two or three) drops the batch: a fresh allocation per batch cost a page
/// fault per 4 KiB, as the allocator handed the memory back to the kernel between batches,
/// and a buffer that comes back keeps its memory initialised (see [`Output`]).
const SHELF: usize = 3;

type Shelf = Mutex<Vec<Vec<u8>>>;

/// A batch's buffer while the consumer holds the batch; it goes back on its stream's
/// shelf when dropped, or is freed if the stream is gone or the shelf full.
struct Lent {
    buf: Vec<u8>,
    len: usize,
    shelf: Weak<Shelf>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(home) = self.shelf.upgrade() else {
            return;
        };
        // A poisoned lock only means another holder panicked; the memory is then freed.
        if let Ok(mut spare) = home.lock()
            && spare.len() < SHELF
        {
            spare.push(std::mem::take(&mut self.buf));
        }
    }
}

struct State<S, T> {
    input: S,
    t: T,
    pending: Option<Bytes>,
    done: bool,
    shelf: Arc<Shelf>,
}

impl<S, T> State<S, T> {
    /// An output with room for a batch: a buffer back from the consumer, else a new one.
    fn buffer(&self) -> Output {
        let spare = self.shelf.lock().ok().and_then(|mut s| s.pop());
        Output::reuse(spare.unwrap_or_else(|| Vec::with_capacity(OUT_CAPACITY)))
    }

    /// Hands `out` on as one batch, without copying it.
    fn lend(&self, out: Output) -> Bytes {
        let (buf, len) = out.into_parts();
        Bytes::from_owner(Lent {
            buf,
            len,
            shelf: Arc::downgrade(&self.shelf),
        })
    }
}

impl<S, T> State<S, T>
where
    S: Stream<Item = io::Result<Bytes>> + Unpin,
    T: Transform,
{
    /// Feeds one chunk (or the end) to the transform.
    fn feed(&mut self, chunk: Option<io::Result<Bytes>>, out: &mut Output) -> Result<()> {
        match chunk {
            Some(Ok(mut c)) => {
                if c.len() > SLICE {
                    self.pending = Some(c.split_off(SLICE));
                }
                self.t.update(&c, out)
            }
            Some(Err(e)) => Err(Error::Io(e)),
            None => {
                self.done = true;
                self.t.finish(out)
            }
        }
    }
}

/// Applies `t` to `input`, yielding output chunks of a few segments. The first error ends
/// the stream; the input's I/O errors come through as [`Error::Io`].
pub fn transform_stream<S, T>(input: S, t: T) -> impl Stream<Item = Result<Bytes>> + Send
where
    S: Stream<Item = io::Result<Bytes>> + Send + Unpin,
    T: Transform + Send,
{
    let state = State {
        input,
        t,
        pending: None,
        done: false,
        shelf: Arc::new(Mutex::new(Vec::with_capacity(SHELF))),
    };
    stream::unfold(state, |mut st| async move {
        // Set by the end of the input or the first error, whose batch has gone out.
        if st.done {
            return None;
        }
        let mut out = st.buffer();
        loop {
            if st.done || out.len() >= BATCH {
                break;
            }
            let chunk = if let Some(c) = st.pending.take() {
                Some(Ok(c))
            } else if out.is_empty() {
                st.input.next().await
            } else {
                // Something to hand on already: take more only if it is there now.
                match st.input.next().now_or_never() {
                    Some(c) => c,
                    None => break,
                }
            };
            if let Err(e) = st.feed(chunk, &mut out) {
                st.done = true;
                return Some((Err(e), st));
            }
        }
        if out.is_empty() {
            return None;
        }
        let batch = st.lend(out);
        Some((Ok(batch), st))
    })
}

//! Async adapters: any [`Transform`] over a stream of byte chunks, as the gateway's bodies
//! (s3s, aws-sdk-s3, hyper) and tokio readers all provide.

use std::io;

use bytes::{Bytes, BytesMut};
use futures::{FutureExt as _, Stream, StreamExt, stream};

use crate::format::SEGMENT_SIZE;
use crate::transform::Transform;
use crate::{Error, Result};

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

/// Output buffers a stream keeps. Batches are split off them and come back for reuse once
/// the consumer (hyper's write queue, which holds two or three) has dropped them: a fresh
/// allocation per batch cost a page fault per 4 KiB, as the allocator handed the memory
/// back to the kernel between batches, and a growing vector cost copies.
const POOL: usize = 3;

struct State<S, T> {
    input: S,
    t: T,
    pending: Option<Bytes>,
    done: bool,
    pool: Vec<BytesMut>,
    next: usize,
}

impl<S, T> State<S, T> {
    /// A buffer with room for a batch: a pooled one whose batches are all dropped, else a
    /// new one (which replaces a pooled one still in use once the pool is full).
    fn buffer(&mut self) -> (usize, BytesMut) {
        if let Some(i) = self
            .pool
            .iter_mut()
            .position(|b| b.try_reclaim(OUT_CAPACITY))
        {
            return (i, std::mem::take(&mut self.pool[i]));
        }
        let fresh = BytesMut::with_capacity(OUT_CAPACITY);
        if self.pool.len() < POOL {
            self.pool.push(BytesMut::new());
            return (self.pool.len() - 1, fresh);
        }
        self.next = (self.next + 1) % POOL;
        (self.next, fresh)
    }
}

impl<S, T> State<S, T>
where
    S: Stream<Item = io::Result<Bytes>> + Unpin,
    T: Transform,
{
    /// Feeds one chunk (or the end) to the transform.
    fn feed(&mut self, chunk: Option<io::Result<Bytes>>, out: &mut BytesMut) -> Result<()> {
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
        pool: Vec::with_capacity(POOL),
        next: 0,
    };
    stream::unfold(state, |mut st| async move {
        let (slot, mut out) = st.buffer();
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
        let batch = out.split().freeze();
        st.pool[slot] = out;
        (!batch.is_empty()).then_some((Ok(batch), st))
    })
}

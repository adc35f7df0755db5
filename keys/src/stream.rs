//! Async adapters: any [`Transform`] over a stream of byte chunks, as the gateway's bodies
//! (s3s, aws-sdk-s3, hyper) and tokio readers all provide.

use std::io;

use bytes::Bytes;
use futures::{Stream, StreamExt, stream};

use crate::format::SEGMENT_SIZE;
use crate::transform::Transform;
use crate::{Error, Result};

/// Largest slice of input handed to the transform at once, so an output chunk stays a few
/// segments long even when the input arrives in huge chunks.
const SLICE: usize = 4 * SEGMENT_SIZE;

struct State<S, T> {
    input: S,
    t: T,
    pending: Option<Bytes>,
    done: bool,
}

/// Applies `t` to `input`, yielding output chunks of at most a few segments. The first
/// error ends the stream; the input's I/O errors come through as [`Error::Io`].
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
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            let chunk = match st.pending.take() {
                Some(c) => Some(Ok(c)),
                None => st.input.next().await,
            };
            let mut out = Vec::new();
            let r = match chunk {
                Some(Ok(mut c)) => {
                    if c.len() > SLICE {
                        st.pending = Some(c.split_off(SLICE));
                    }
                    st.t.update(&c, &mut out)
                }
                Some(Err(e)) => Err(Error::Io(e)),
                None => {
                    st.done = true;
                    st.t.finish(&mut out)
                }
            };
            match r {
                Err(e) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                Ok(()) if out.is_empty() => {}
                Ok(()) => return Some((Ok(Bytes::from(out)), st)),
            }
        }
    })
}

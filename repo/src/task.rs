//! A spawned task that is cancelled when dropped: reads started ahead of a walk or a
//! writer stop when what wanted them fails or no longer needs them.

/// A spawned task, aborted when dropped.
pub(crate) struct Task<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

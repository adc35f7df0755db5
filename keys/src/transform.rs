//! The push interface shared by every sealer and opener, so one set of stream adapters
//! serves them all.

use crate::Output;
use crate::Result;

/// A byte transformer fed in pieces: input in, output appended to `out`.
pub trait Transform {
    /// Takes the next piece of input.
    ///
    /// # Errors
    /// Whatever the transformer detects in its input.
    fn update(&mut self, input: &[u8], out: &mut Output) -> Result<()>;

    /// Ends the input; checks that it ended where it may and emits what was held back.
    /// Call it once.
    ///
    /// # Errors
    /// Whatever the transformer detects at the end, such as truncation.
    fn finish(&mut self, out: &mut Output) -> Result<()>;

    /// Runs the whole of `input` through and returns the output: for small inputs and tests.
    ///
    /// # Errors
    /// As [`Transform::update`] and [`Transform::finish`].
    fn run(mut self, input: &[u8]) -> Result<Vec<u8>>
    where
        Self: Sized,
    {
        let mut out = Output::new();
        self.update(input, &mut out)?;
        self.finish(&mut out)?;
        Ok(out.into_vec())
    }
}

//! Room on the stack for the backup walk, which recurses once per directory level: a
//! user can nest directories `tree::MAX_DEPTH` deep, and a tree a thousand levels deep
//! overflowed the walk's thread (a blocking-pool thread, 2 MiB) and killed the backup.
//! Where less than [`RED_ZONE`] of the stack is left, the next level runs on a new
//! segment of [`SEGMENT`] bytes (`stacker`, as rustc does for its own recursion). A
//! synchronous walk enters each segment once, so this costs one mapping per segment.
//! (The restore walks with a loop instead; asynchronous recursion would be polled from
//! the top on each wake-up, entering every segment again.)

/// What one level may use before the next check, with room for the calls below it
/// (storage reads, chunking): a level is tens of KiB of frames in a debug build.
pub(crate) const RED_ZONE: usize = 2 << 20;

/// The size of each new stack segment. Only the pages used are backed by memory.
pub(crate) const SEGMENT: usize = 16 << 20;

/// Runs `f` (the next level of a synchronous walk) with at least [`RED_ZONE`] of stack.
pub(crate) fn with_room<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, SEGMENT, f)
}

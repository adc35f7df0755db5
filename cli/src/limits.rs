//! The process's limits: its open-file limit, raised at start from its soft value to its
//! hard one, and the stack its command runs on.
//!
//! A restore keeps the directories it writes into open while their files are queued
//! (thousands at once over a tree of small directories), a backup one per level of the
//! tree, and a gateway one per connection. The usual soft limit (1,024, with a hard limit
//! far above it: systemd gives 524,288) is a default for programs that use `select`,
//! which nothing here does; Go programs (restic, rclone) raise it the same way.

/// The stack of the thread each command runs on (a main thread has 8 MiB). The walks of
/// `check`, `ls`, `diff` and `repair snapshots` recurse once per directory level, up to
/// `kura_repo::MAX_DEPTH` levels: in a debug build a level takes up to tens of KiB.
/// Only the pages used are ever backed by memory. (Backup and restore walk without
/// recursing on the caller's stack.)
pub const COMMAND_STACK: usize = 256 << 20;

/// Raises the soft limit on open files to the hard limit. A failure leaves the limit as
/// it was: nothing here needs more, only large trees do.
pub fn raise_open_files() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    // An unlimited hard limit is refused as a soft one above `fs.nr_open`.
    const UNLIMITED_CAP: u64 = 1 << 20;
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(UNLIMITED_CAP);
    if limit.current.is_some_and(|soft| soft >= hard) {
        return;
    }
    let raised = rustix::process::Rlimit {
        current: Some(hard),
        maximum: limit.maximum,
    };
    let _ = setrlimit(Resource::Nofile, raised);
}

//! The process's limits: its open-file limit, raised at start from its soft value to its
//! hard one (not for a backup that runs a program, which would inherit it), and the stack
//! its command runs on.
//!
//! A restore keeps the directories it writes into open while their files are queued
//! (thousands at once over a tree of small directories), a backup one per level of the
//! tree, and a gateway one per connection. The usual soft limit (1,024, with a hard limit
//! far above it: systemd gives 524,288) is a default for programs that use `select`,
//! which nothing here does; Go programs (restic, rclone) raise it the same way.

/// The stack of the thread each command runs on (a main thread has 8 MiB): in a debug
/// build a level of a recursive walk takes up to tens of KiB. Only the pages used are ever
/// backed by memory. (Backup and restore walk without recursing on the caller's stack.)
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

/// Runs `command` with `args` on a thread of [`COMMAND_STACK`]: `check`, `ls`, `diff` and
/// `repair snapshots` recurse once per directory level of a snapshot, which may nest
/// `kura_repo::MAX_DEPTH` levels. Where no such thread can be made (a low `ulimit -v`), the
/// command runs on the calling thread, with its stack. A panic exits 101, as on the main
/// thread.
pub fn on_command_thread<T: Send + 'static>(
    args: T,
    command: fn(T) -> std::process::ExitCode,
) -> std::process::ExitCode {
    use std::sync::{Arc, Mutex, PoisonError};
    let args = Arc::new(Mutex::new(Some(args)));
    let take = |args: &Mutex<Option<T>>| args.lock().unwrap_or_else(PoisonError::into_inner).take();
    let spawned = std::thread::Builder::new()
        .name("kura".into())
        .stack_size(COMMAND_STACK)
        .spawn({
            let args = Arc::clone(&args);
            move || take(&args).map_or(std::process::ExitCode::FAILURE, command)
        });
    match spawned.map(std::thread::JoinHandle::join) {
        Ok(Ok(code)) => code,
        // The panic has printed its message.
        Ok(Err(_)) => std::process::ExitCode::from(101),
        Err(_) => take(&args).map_or(std::process::ExitCode::FAILURE, command),
    }
}

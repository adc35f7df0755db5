//! Progress bars for backup and restore: drawn on stderr only when it is a terminal (never
//! into a pipe, a file or a log collector), from the repository handle's live counters,
//! on a thread of its own so that the work never waits for the terminal.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use kura_repo::Progress;

/// How often the counters are copied into the bar.
const TICK: Duration = Duration::from_millis(100);

/// A bar being drawn; dropping it clears the bar and stops the thread.
pub struct Bar {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Starts a bar labelled `verb` ("backup", "restore") when stderr is a terminal.
pub fn start(progress: Arc<Progress>, verb: &'static str) -> Bar {
    let stop = Arc::new(AtomicBool::new(false));
    if !std::io::stderr().is_terminal() {
        return Bar { stop, thread: None };
    }
    let flag = stop.clone();
    let thread = std::thread::spawn(move || draw(&progress, verb, &flag));
    Bar {
        stop,
        thread: Some(thread),
    }
}

fn draw(progress: &Progress, verb: &'static str, stop: &AtomicBool) {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_prefix(verb);
    let mut with_total = false;
    bar.set_style(style(false));
    while !stop.load(Ordering::Relaxed) {
        let total = progress.total();
        if total > 0 && !with_total {
            with_total = true;
            bar.set_length(total);
            bar.set_style(style(true));
        }
        bar.set_position(progress.bytes());
        let new = progress.bytes_new();
        bar.set_message(if new > 0 {
            format!("{} files, {} new", progress.files(), HumanBytes(new))
        } else {
            format!("{} files", progress.files())
        });
        std::thread::sleep(TICK);
    }
    bar.finish_and_clear();
}

fn style(with_total: bool) -> ProgressStyle {
    let template = if with_total {
        "{spinner} {prefix} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}"
    } else {
        "{spinner} {prefix} {bytes} {binary_bytes_per_sec} {elapsed} {msg}"
    };
    ProgressStyle::with_template(template)
        .expect("the templates above parse")
        .progress_chars("=> ")
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

//! A loop device over a file, for tests of real block I/O: made with `losetup`, detached
//! when dropped. This kernel has no device-mapper, but discard and write-zeroes on a loop
//! device punch holes in its backing file, which the file's block count shows.

use std::path::Path;
use std::process::Command;

/// A loop device (its `/dev/loopN` path), detached on drop.
pub struct Loop(pub String);

impl Loop {
    /// A loop device over `file`; `None` where this process may not make one (not root,
    /// no loop driver): the device tests then say so and pass.
    #[must_use]
    pub fn attach(file: &Path) -> Option<Self> {
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .output()
            .ok()?;
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && dev.starts_with("/dev/")).then_some(Self(dev))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["--detach", &self.0]).status();
    }
}

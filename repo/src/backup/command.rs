//! The command behind `Source::Command` (`kura backup --stdin-from-command`): started with
//! its standard output piped to the backup and its standard error passed through, and
//! waited for after its output ended, so that a command that failed part-way (a dump that
//! lost its database) never becomes a complete-looking snapshot.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, ExitStatus, Stdio};

use crate::error::{RepoError, Result};

/// A running command whose standard output is the stream.
pub(super) struct Child {
    child: std::process::Child,
    /// The program's name, for messages (not its arguments, which may hold a password).
    program: String,
}

impl Child {
    /// Starts `argv` (the program, then its arguments).
    pub(super) fn spawn(argv: Vec<OsString>) -> Result<Self> {
        let mut argv = argv.into_iter();
        let Some(program) = argv.next() else {
            return Err(RepoError::Invalid("no command to run".into()));
        };
        let name = program.to_string_lossy().into_owned();
        let child = Command::new(&program)
            .args(argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| RepoError::CommandFailed {
                program: name.clone(),
                how: format!("could not be started: {e}"),
            })?;
        Ok(Self {
            child,
            program: name,
        })
    }

    /// Its standard output, taken (read to its end before [`Child::wait`]).
    pub(super) fn stdout(&mut self) -> impl Read + use<> {
        self.child
            .stdout
            .take()
            .expect("spawned with a piped stdout")
    }

    /// Waits for the command to exit, once its output ended. With `abandon` (the backup
    /// failed before the output ended) it is killed first and its status ignored.
    ///
    /// # Errors
    /// [`RepoError::CommandFailed`] when it did not exit 0.
    pub(super) fn wait(mut self, abandon: bool) -> Result<()> {
        if abandon {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return Ok(());
        }
        let status = self.child.wait().map_err(|e| RepoError::CommandFailed {
            program: self.program.clone(),
            how: format!("could not be waited for: {e}"),
        })?;
        match how_it_failed(status) {
            None => Ok(()),
            Some(how) => Err(RepoError::CommandFailed {
                program: self.program,
                how,
            }),
        }
    }
}

/// How a command that did not exit 0 ended, in words; `None` for success.
fn how_it_failed(status: ExitStatus) -> Option<String> {
    if status.success() {
        None
    } else if let Some(code) = status.code() {
        Some(format!("exited with status {code}"))
    } else if let Some(signal) = status.signal() {
        Some(format!("was killed by signal {signal}"))
    } else {
        Some(format!("ended with {status}"))
    }
}

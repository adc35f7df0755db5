//! What a directory holds, recursively: tests read an upstream's files to check that it
//! stores only ciphertext.

use std::path::{Path, PathBuf};

/// Every file (not directory) under `dir`, recursively, in no particular order.
///
/// # Panics
/// When a directory cannot be read.
#[must_use]
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("reading {}: {e}", d.display())) {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

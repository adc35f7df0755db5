//! `kura restore`: a snapshot's tree back onto a directory, or one file to a writer.
//!
//! Blobs are fetched one at a time by range GET through the gateway (FORMAT.md section 6)
//! and checked against their IDs; holes (`zero` entries) are skipped, so restored files
//! are sparse where the source was zero.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek as _, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::backend::Backend;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::tree::{Content, Node, NodeType};

/// Counts of what a restore wrote.
#[derive(Debug, Default)]
pub struct RestoreSummary {
    /// Files written (hard links included).
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Entries not restored (device nodes, FIFOs and sockets, for now), by path.
    pub skipped: Vec<String>,
}

/// Restores the tree `root` under `target` (created if missing). Entries whose path (from
/// the snapshot root, `/`-separated) does not start with `include`, when given, are skipped.
///
/// # Errors
/// Storage errors, blobs that fail verification, and local write errors.
pub async fn restore<B: Backend>(
    repo: &Repository<B>,
    root: &Id,
    target: &Path,
    include: Option<&str>,
) -> Result<RestoreSummary> {
    std::fs::create_dir_all(target).map_err(|e| RepoError::io(target, e))?;
    let mut r = Restorer {
        repo,
        include: include.map(|s| s.trim_matches('/').to_string()),
        links: HashMap::new(),
        summary: RestoreSummary::default(),
    };
    r.dir(root, target, "").await?;
    Ok(r.summary)
}

/// Writes the content of a file node to `out` (for `kura restore SNAP -`).
///
/// # Errors
/// Storage and verification errors, or when `out` fails.
pub async fn write_content<B: Backend>(
    repo: &Repository<B>,
    node: &Node,
    out: &mut impl Write,
) -> Result<u64> {
    let mut written = 0u64;
    let zeros = vec![0u8; 1 << 16];
    for c in node.content.as_deref().unwrap_or_default() {
        match c {
            Content::Blob { blob } => {
                let data = repo.read_blob(blob).await?;
                out.write_all(&data)
                    .map_err(|e| RepoError::io(Path::new("-"), e))?;
                written += data.len() as u64;
            }
            Content::Zero { zero } => {
                let mut left = *zero;
                while left > 0 {
                    let n = usize::try_from(left).map_or(zeros.len(), |l| l.min(zeros.len()));
                    out.write_all(&zeros[..n])
                        .map_err(|e| RepoError::io(Path::new("-"), e))?;
                    left -= n as u64;
                }
                written += zero;
            }
        }
    }
    Ok(written)
}

struct Restorer<'a, B: Backend> {
    repo: &'a Repository<B>,
    include: Option<String>,
    /// (dev, inode) of multiply-linked files already restored, and where.
    links: HashMap<(u64, u64), PathBuf>,
    summary: RestoreSummary,
}

impl<B: Backend> Restorer<'_, B> {
    async fn dir(&mut self, tree: &Id, dir: &Path, rel: &str) -> Result<()> {
        let tree = self.repo.read_tree(tree).await?;
        for node in &tree.nodes {
            if !node.name_is_safe() {
                return Err(RepoError::corrupt(
                    "tree",
                    format!("unsafe name {} in {rel:?}", node.name().display()),
                ));
            }
            let name = node.name();
            let path = dir.join(&name);
            let rel = if rel.is_empty() {
                String::from_utf8_lossy(name.as_bytes()).into_owned()
            } else {
                format!("{rel}/{}", String::from_utf8_lossy(name.as_bytes()))
            };
            let wanted = self.include.as_deref().is_none_or(|inc| {
                rel == inc
                    || rel.starts_with(&format!("{inc}/"))
                    || inc.starts_with(&format!("{rel}/"))
            });
            if !wanted {
                continue;
            }
            match node.kind {
                Some(NodeType::Dir) => {
                    std::fs::create_dir_all(&path).map_err(|e| RepoError::io(&path, e))?;
                    self.summary.dirs += 1;
                    if let Some(sub) = &node.subtree {
                        Box::pin(self.dir(sub, &path, &rel)).await?;
                    }
                    set_meta(&path, node, true);
                }
                Some(NodeType::File) => self.file(node, &path).await?,
                Some(NodeType::Symlink) => {
                    let target = hex::decode(node.target_hex.as_deref().unwrap_or_default())
                        .map_err(|e| RepoError::corrupt("tree", e))?;
                    let _ = std::fs::remove_file(&path);
                    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), &path)
                        .map_err(|e| RepoError::io(&path, e))?;
                    self.summary.symlinks += 1;
                }
                _ => self.summary.skipped.push(rel),
            }
        }
        Ok(())
    }

    async fn file(&mut self, node: &Node, path: &Path) -> Result<()> {
        if node.links > 1 {
            if let Some(first) = self.links.get(&(node.dev, node.inode)) {
                let _ = std::fs::remove_file(path);
                std::fs::hard_link(first, path).map_err(|e| RepoError::io(path, e))?;
                self.summary.files += 1;
                return Ok(());
            }
            self.links
                .insert((node.dev, node.inode), path.to_path_buf());
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| RepoError::io(path, e))?;
        let mut pos = 0u64;
        for c in node.content.as_deref().unwrap_or_default() {
            match c {
                Content::Blob { blob } => {
                    let data = self.repo.read_blob(blob).await?;
                    f.write_all(&data).map_err(|e| RepoError::io(path, e))?;
                    pos += data.len() as u64;
                }
                Content::Zero { zero } => {
                    pos += zero;
                    f.seek(SeekFrom::Start(pos))
                        .map_err(|e| RepoError::io(path, e))?;
                }
            }
        }
        // A trailing hole needs the length set explicitly.
        f.set_len(pos).map_err(|e| RepoError::io(path, e))?;
        if node.size.is_some_and(|s| s != pos) {
            return Err(RepoError::corrupt(
                path.display().to_string(),
                "restored length differs from the snapshot",
            ));
        }
        self.summary.bytes += pos;
        self.summary.files += 1;
        drop(f);
        set_meta(path, node, false);
        Ok(())
    }
}

/// Mode, owner (when permitted) and modification time; failures are not fatal, as with
/// `cp -p` run by a user who cannot chown.
fn set_meta(path: &Path, node: &Node, is_dir: bool) {
    // chown first (it clears set-ID bits), the time while the file is still writable, the
    // mode last.
    let _ = std::os::unix::fs::chown(path, Some(node.uid), Some(node.gid));
    let secs = node.mtime.div_euclid(1_000_000_000);
    let nanos = node.mtime.rem_euclid(1_000_000_000);
    if let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) {
        let t = std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos);
        let f = if is_dir {
            File::open(path)
        } else {
            OpenOptions::new().write(true).open(path)
        };
        if let Ok(f) = f {
            let _ = f.set_modified(t);
        }
    }
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(node.mode));
}

//! Where a one-file snapshot (an image, a stream) is restored: a block device, opened
//! exclusively and checked to hold the whole image before a byte is written, or a
//! regular file, created or replaced whole (written beside it and renamed over it).
//!
//! On Linux, `O_EXCL` without `O_CREAT` on a block device asks for an exclusive open: the
//! kernel refuses it (`EBUSY`) while the device is mounted, part of a device-mapper or
//! RAID stack, or held exclusively by another program, which is what a restore must not
//! overwrite.

use std::fs::{File, OpenOptions};
use std::io::{Seek as _, SeekFrom};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use crate::error::{RepoError, Result};
use crate::tree::{Node, NodeType};

/// An opened target for one file's content.
#[derive(Debug)]
pub struct FileTarget {
    pub(super) file: File,
    path: PathBuf,
    /// The device's size, for a block device.
    device_size: Option<u64>,
    /// For a regular file: where its content is written until it is whole.
    beside: Option<Beside>,
}

impl FileTarget {
    /// Opens `path` for `node`'s content: a block device exclusively, refused when it is
    /// in use or smaller than the content; a regular file (or none) as a new file beside
    /// it, renamed over it by the restore once whole; anything else (a FIFO, a character
    /// device) as it is. Refuses a node that is not a regular file before `path` is
    /// touched.
    ///
    /// # Errors
    /// [`RepoError::Invalid`] for a node that is not a regular file;
    /// [`RepoError::DeviceBusy`], [`RepoError::TargetTooSmall`], or a failure to open.
    pub fn open(path: &Path, node: &Node) -> Result<Self> {
        Self::open_as(path, node, false)
    }

    /// As [`FileTarget::open`], but a regular file is opened as it is, neither created
    /// nor truncated, and must hold exactly the image's size: for a restore that writes
    /// only what differs from what the target holds (`--only-changed-since`).
    ///
    /// # Errors
    /// As [`FileTarget::open`]; [`RepoError::Invalid`] for a file of another size.
    pub fn open_in_place(path: &Path, node: &Node) -> Result<Self> {
        Self::open_as(path, node, true)
    }

    fn open_as(path: &Path, node: &Node, in_place: bool) -> Result<Self> {
        one_file(node)?;
        let needed = node.size.unwrap_or(0);
        let meta = match std::fs::metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(RepoError::io(path, e)),
        };
        let is_device = meta
            .as_ref()
            .is_some_and(|m| m.file_type().is_block_device());
        if !in_place && meta.as_ref().is_none_or(std::fs::Metadata::is_file) {
            let (file, beside) = Beside::create(path)?;
            return Ok(Self {
                file,
                path: path.to_path_buf(),
                device_size: None,
                beside: Some(beside),
            });
        }
        if !is_device {
            // Without waiting: a FIFO at the name would block the open for a reader. In
            // place, read too: blocks are read back to check that it holds the older image.
            let file = OpenOptions::new()
                .read(in_place)
                .write(true)
                .create(!in_place)
                .truncate(!in_place)
                .custom_flags(super::write::NON_BLOCK)
                .open(path)
                .map_err(|e| RepoError::io(path, e))?;
            if in_place {
                let meta = file.metadata().map_err(|e| RepoError::io(path, e))?;
                if !meta.is_file() || meta.len() != needed {
                    return Err(RepoError::Invalid(format!(
                        "{} is not an image of {needed} bytes: it cannot hold the older snapshot",
                        path.display()
                    )));
                }
            }
            return Ok(Self {
                file,
                path: path.to_path_buf(),
                device_size: None,
                beside: None,
            });
        }
        // Read too: `--only-changed-since` reads blocks back to check what it holds.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::EXCL.bits().cast_signed())
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) {
                    RepoError::DeviceBusy {
                        path: path.display().to_string(),
                    }
                } else {
                    RepoError::io(path, e)
                }
            })?;
        // What was opened, not what the name pointed at a moment before.
        let opened = file.metadata().map_err(|e| RepoError::io(path, e))?;
        if !opened.file_type().is_block_device() {
            return Err(RepoError::Invalid(format!(
                "{} changed while it was opened: it is no longer a block device",
                path.display()
            )));
        }
        let size = fits(&file, path, needed)?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            device_size: Some(size),
            beside: None,
        })
    }

    /// The block device's size in bytes; `None` for a regular file.
    #[must_use]
    pub fn device_size(&self) -> Option<u64> {
        self.device_size
    }

    /// The path it was opened at.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the content is written into the target itself (a block device, a FIFO, a
    /// character device, `--only-changed-since`), so that a restore stopped part-way
    /// leaves part of it there; a regular file is written beside it instead.
    #[must_use]
    pub fn in_place(&self) -> bool {
        self.beside.is_none()
    }

    /// Makes what was written durable and, for a regular file, puts it in place.
    pub(super) fn finish(mut self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| RepoError::io(&self.path, e))?;
        match self.beside.take() {
            Some(beside) => beside.rename_over(),
            None => Ok(()),
        }
    }
}

/// A regular file's content written under a temporary name in the file's directory and
/// renamed over it only once whole and synced, so that a restore that fails (an outage, a
/// damaged pack, a full disk) leaves the file that was there, and no partial one under
/// its name. The new file takes the old one's mode and owner. Removed when dropped
/// unfinished.
#[derive(Debug)]
struct Beside {
    temp: PathBuf,
    /// The file replaced: the path given, or the file a symlink there points at.
    real: PathBuf,
    /// The directory of both.
    dir: PathBuf,
    placed: bool,
}

impl Beside {
    fn create(path: &Path) -> Result<(File, Self)> {
        let real = if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink()) {
            // Through the link, as an open of the path would write; a link to a file not
            // there yet names where it is made.
            std::fs::canonicalize(path)
                .or_else(|_| {
                    std::fs::read_link(path).map(|to| match path.parent() {
                        Some(dir) => dir.join(to),
                        None => to,
                    })
                })
                .map_err(|e| RepoError::io(path, e))?
        } else {
            path.to_path_buf()
        };
        let dir = match real.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let old = match std::fs::metadata(&real) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(RepoError::io(path, e)),
        };
        let (file, temp) = loop {
            let temp = dir.join(format!(
                "{}{:016x}",
                super::unfinished::TEMP_PREFIX,
                super::write::temp_number()?
            ));
            // 0666 less the umask for a new file, as a plain create gives.
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o666)
                .custom_flags(
                    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC)
                        .bits()
                        .cast_signed(),
                )
                .open(&temp)
            {
                Ok(f) => break (f, temp),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(RepoError::io(path, e)),
            }
        };
        let beside = Self {
            temp,
            real,
            dir,
            placed: false,
        };
        if let Some(old) = old {
            use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
            // The owner first: a change of owner clears set-ID bits. The new file's own
            // (the effective IDs, or a set-group-ID directory's group) may already be it.
            let new = file.metadata().map_err(|e| RepoError::io(path, e))?;
            if (old.uid(), old.gid()) != (new.uid(), new.gid()) {
                rustix::fs::fchown(
                    &file,
                    Some(rustix::fs::Uid::from_raw(old.uid())),
                    Some(rustix::fs::Gid::from_raw(old.gid())),
                )
                .map_err(|e| {
                    RepoError::Invalid(format!(
                        "{} is not this user's: it cannot be replaced with a file of the same owner ({e})",
                        path.display()
                    ))
                })?;
            }
            file.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777))
                .map_err(|e| RepoError::io(path, e))?;
        }
        Ok((file, beside))
    }

    fn rename_over(mut self) -> Result<()> {
        std::fs::rename(&self.temp, &self.real).map_err(|e| RepoError::io(&self.real, e))?;
        self.placed = true;
        // The rename itself is durable once the directory is synced.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| RepoError::io(&self.dir, e))
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The size of what `file` opens (a block device's end is its size), refused when it is
/// less than `needed`.
fn fits(mut file: &File, path: &Path, needed: u64) -> Result<u64> {
    let size = file
        .seek(SeekFrom::End(0))
        .and_then(|size| file.seek(SeekFrom::Start(0)).map(|_| size))
        .map_err(|e| RepoError::io(path, e))?;
    if size < needed {
        return Err(RepoError::TargetTooSmall {
            path: path.display().to_string(),
            size,
            needed,
        });
    }
    Ok(size)
}

/// Refuses a node that is not a regular file where only a file's content can go: a
/// directory or a link has none, and writing "nothing" would truncate the target (or
/// feed an empty stream to a pipe) and report success.
pub(super) fn one_file(node: &Node) -> Result<()> {
    if node.kind == Some(NodeType::File) {
        return Ok(());
    }
    let kind = node.kind.map_or_else(
        || "an entry of unknown type".to_string(),
        |k| format!("a {k:?}"),
    );
    Err(RepoError::Invalid(format!(
        "the snapshot holds {kind} ({}), not a file: restore it to a directory",
        node.name().to_string_lossy()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No block device can be made without root and a loop device; the size check is
    /// the same seek on a regular file.
    #[test]
    fn a_target_smaller_than_the_image_is_refused_and_a_large_enough_one_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("small.img");
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let file = File::open(&path).unwrap();
        let err = fits(&file, &path, 4097).unwrap_err();
        assert!(
            matches!(
                err,
                RepoError::TargetTooSmall {
                    size: 4096,
                    needed: 4097,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("4096 bytes"), "{err}");
        assert_eq!(fits(&file, &path, 4096).unwrap(), 4096);
        assert_eq!(std::fs::read(&path).unwrap().len(), 4096, "nothing written");
    }
}

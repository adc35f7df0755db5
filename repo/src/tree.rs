//! Trees (FORMAT.md section 8.1-8.2): one JSON blob per directory.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};

use serde::{Deserialize, Serialize};

use crate::id::Id;

/// A node's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeType {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Character device.
    Chardev,
    /// Block device.
    Blockdev,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
}

/// A piece of a file's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A stored chunk.
    Blob {
        /// Its ID.
        blob: Id,
    },
    /// Zeros that were not stored.
    Zero {
        /// How many.
        zero: u64,
    },
}

/// One entry of a directory.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Node {
    /// Name, when valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Name bytes in hex, otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_hex: Option<String>,
    /// Type.
    #[serde(rename = "type")]
    pub kind: Option<NodeType>,
    /// Permission, set-ID and sticky bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, ns since the epoch.
    pub mtime: i128,
    /// Status change time, ns since the epoch.
    pub ctime: i128,
    /// Inode number.
    pub inode: u64,
    /// Device of the file system.
    pub dev: u64,
    /// Hard link count.
    pub links: u64,
    /// File length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// File content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Content>>,
    /// Directory tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtree: Option<Id>,
    /// Symlink target bytes, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_hex: Option<String>,
    /// Device number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdev: Option<u64>,
}

impl Node {
    /// Sets the name from file-system bytes.
    pub fn set_name(&mut self, name: &OsStr) {
        match name.to_str() {
            Some(s) => self.name = Some(s.to_string()),
            None => self.name_hex = Some(hex::encode(name.as_bytes())),
        }
    }

    /// The name as file-system bytes.
    #[must_use]
    pub fn name(&self) -> OsString {
        match (&self.name, &self.name_hex) {
            (Some(s), _) => OsString::from(s),
            (None, Some(h)) => OsString::from_vec(hex::decode(h).unwrap_or_default()),
            (None, None) => OsString::new(),
        }
    }

    /// Whether the name is one a restore may create (no separators, not `.` or `..`).
    #[must_use]
    pub fn name_is_safe(&self) -> bool {
        let n = self.name();
        let b = n.as_bytes();
        !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/') && !b.contains(&0)
    }
}

/// A directory's entries, sorted by name bytes.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Tree {
    /// The entries.
    pub nodes: Vec<Node>,
}

impl Tree {
    /// The entry called `name`.
    #[must_use]
    pub fn find(&self, name: &OsStr) -> Option<&Node> {
        self.nodes
            .binary_search_by(|n| n.name().as_bytes().cmp(name.as_bytes()))
            .ok()
            .map(|i| &self.nodes[i])
    }

    /// Sorts the entries as FORMAT.md requires.
    pub fn sort(&mut self) {
        self.nodes
            .sort_by(|a, b| a.name().as_bytes().cmp(b.name().as_bytes()));
    }
}

//! Trees (FORMAT.md section 8.1-8.2): one JSON blob per directory.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};

use serde::{Deserialize, Serialize};

use crate::id::Id;

/// `MAX_DEPTH`: the deepest directory level that a backup walks into and a restore writes,
/// the top being the first; and `MAX_PATH_BYTES`, the longest path (from the top) of a
/// directory either enters. Each level keeps a directory open and its path in memory, so
/// these bound what a hostile tree or snapshot can make a walk hold (about `MAX_DEPTH`
/// times `MAX_PATH_BYTES` at most). A directory beyond them is recorded as an error (the
/// snapshot marked incomplete; the restore lists it) and the walk goes on beside it. Both
/// are far beyond trees in use: the kernel's `PATH_MAX`, which most programs cannot go
/// past, is 4,096 bytes. (Before, a tree a thousand levels deep overflowed the backup
/// walk's stack and killed every backup of it: `deep.rs`.)
pub const MAX_DEPTH: usize = 4_096;

/// See [`MAX_DEPTH`].
pub const MAX_PATH_BYTES: usize = 32 << 10;

/// Why a directory at `depth` (the top is 1) with a path of `path_len` bytes is not
/// walked into, if it is not ([`MAX_DEPTH`]).
pub(crate) fn too_deep(depth: usize, path_len: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        Some(format!("nested more than {MAX_DEPTH} directories deep"))
    } else if path_len > MAX_PATH_BYTES {
        Some(format!("its path is longer than {MAX_PATH_BYTES} bytes"))
    } else {
        None
    }
}

/// Where a directory lies in a snapshot's trees: how many levels below the top tree (the
/// top's own subdirectories are at 1) and how many bytes its path from the top has (names
/// joined by `/`). Every walk that descends a snapshot's trees counts with it: the
/// restore, and those that recurse (`check`, `diff`, `repair snapshots`, `kura ls`), which
/// so go no deeper than [`MAX_DEPTH`] and [`MAX_PATH_BYTES`] either, and give a hostile
/// snapshot, deeper than any backup makes, an error instead of overflowing their stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Depth {
    levels: usize,
    path_bytes: usize,
}

impl Depth {
    /// The subdirectory `name` of the directory at `self`; `Err` with the reason when it
    /// lies beyond [`MAX_DEPTH`] or [`MAX_PATH_BYTES`].
    ///
    /// # Errors
    /// The text [`too_deep`] gives.
    pub fn below(self, name: &[u8]) -> std::result::Result<Self, String> {
        let next = Self {
            levels: self.levels + 1,
            path_bytes: self.path_bytes + usize::from(self.path_bytes > 0) + name.len(),
        };
        too_deep(next.levels, next.path_bytes).map_or(Ok(next), Err)
    }
}

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
    /// Extended attributes: `(name, hex(value))`, in the order the file system listed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xattrs: Option<Vec<(String, String)>>,
    /// The file changed while the backup read it, at every reading: the content is what
    /// was read (possibly torn), and no later backup takes it as unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changed_during_backup: bool,
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

    /// Checks what a restore relies on before it creates anything: every name is one a
    /// restore may create, and names are sorted and unique (FORMAT.md 8.1). A second entry
    /// with a symlink's name would otherwise be written through that symlink.
    ///
    /// # Errors
    /// A description of the first offending name.
    #[allow(
        clippy::unnecessary_debug_formatting,
        reason = "names come from the repository: quoted and escaped, never raw to a terminal"
    )]
    pub fn check_names(&self) -> std::result::Result<(), String> {
        if let Some(bad) = self.nodes.iter().find(|n| !n.name_is_safe()) {
            return Err(format!("unsafe name {:?}", bad.name()));
        }
        if let Some(w) = self
            .nodes
            .windows(2)
            .find(|w| w[0].name().as_bytes() >= w[1].name().as_bytes())
        {
            return Err(format!(
                "names not sorted and unique: {:?} before {:?}",
                w[0].name(),
                w[1].name()
            ));
        }
        Ok(())
    }

    /// Sorts the entries as FORMAT.md requires.
    pub fn sort(&mut self) {
        self.nodes
            .sort_by(|a, b| a.name().as_bytes().cmp(b.name().as_bytes()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The restore refuses by these too (a hostile snapshot deeper than any backup
    /// makes); the e2e test reaches them only through the backup.
    #[test]
    fn a_directory_is_walked_up_to_the_deepest_level_and_the_longest_path_and_no_further() {
        assert_eq!(too_deep(MAX_DEPTH, MAX_PATH_BYTES), None);
        assert!(too_deep(MAX_DEPTH + 1, 10).is_some_and(|why| why.contains("4096")));
        assert!(too_deep(1, MAX_PATH_BYTES + 1).is_some_and(|why| why.contains("32768")));
    }

    #[test]
    fn a_depth_counts_levels_and_path_bytes_and_refuses_past_the_limits() {
        let mut at = Depth::default();
        for _ in 0..MAX_DEPTH {
            at = at.below(b"d").unwrap();
        }
        // "d/d/.../d": one byte per name and one between each two.
        assert_eq!(
            at,
            Depth {
                levels: MAX_DEPTH,
                path_bytes: 2 * MAX_DEPTH - 1
            }
        );
        assert!(at.below(b"d").is_err_and(|why| why.contains("4096")));
        let long = vec![b'n'; MAX_PATH_BYTES];
        assert!(Depth::default().below(&long).is_ok());
        let one = Depth::default().below(b"a").unwrap();
        assert!(one.below(&long).is_err_and(|why| why.contains("32768")));
    }

    fn tree(names: &[&[u8]]) -> Tree {
        Tree {
            nodes: names
                .iter()
                .map(|n| {
                    let mut node = Node::default();
                    node.set_name(OsStr::from_bytes(n));
                    node
                })
                .collect(),
        }
    }

    #[test]
    fn sorted_unique_safe_names_pass() {
        assert_eq!(tree(&[b"a", b"b", b"b\xff", b"c"]).check_names(), Ok(()));
        assert_eq!(tree(&[]).check_names(), Ok(()));
    }

    #[test]
    fn a_repeated_name_is_refused() {
        // The attack: a symlink "x" to elsewhere, then a file "x" written through it.
        let err = tree(&[b"a", b"x", b"x"]).check_names().unwrap_err();
        assert!(err.contains("sorted and unique"), "{err}");
    }

    #[test]
    fn unsorted_names_are_refused() {
        assert!(tree(&[b"b", b"a"]).check_names().is_err());
    }

    #[test]
    fn names_that_escape_the_directory_are_refused() {
        for bad in [&b".."[..], b".", b"", b"a/b", b"nul\0"] {
            let err = tree(&[bad]).check_names().unwrap_err();
            assert!(err.contains("unsafe name"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn non_utf8_names_round_trip_through_json() {
        let t = tree(&[b"caf\xc3\xa9", b"bad\xffname"]);
        let json = serde_json::to_string(&t).unwrap();
        let back: Tree = serde_json::from_str(&json).unwrap();
        assert_eq!(back.nodes[0].name(), t.nodes[0].name());
        assert_eq!(back.nodes[1].name().as_bytes(), b"bad\xffname");
    }
}

//! `kura diff`: what changed between two snapshots, path by path. Identical subtrees (same
//! tree ID) are skipped without being read.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt as _;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::{Depth, Node, NodeType};

/// One difference.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    /// `+` added, `-` removed, `M` content or metadata changed, `T` type changed.
    pub kind: char,
    /// Path from the snapshot root, `/`-separated.
    pub path: String,
}

/// The changes from tree `a` to tree `b`, in path order.
///
/// # Errors
/// Storage errors, or trees that do not verify.
pub async fn diff<S: Storage>(repo: &Repository<S>, a: &Id, b: &Id) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    let top = (String::new(), Depth::default());
    walk(repo, Some(*a), Some(*b), top, &mut out).await?;
    Ok(out)
}

async fn nodes<S: Storage>(
    repo: &Repository<S>,
    tree: Option<Id>,
) -> Result<BTreeMap<Vec<u8>, Node>> {
    let Some(id) = tree else {
        return Ok(BTreeMap::new());
    };
    Ok(repo
        .read_tree(&id)
        .await?
        .nodes
        .into_iter()
        .map(|n| (n.name().as_bytes().to_vec(), n))
        .collect())
}

fn same(a: &Node, b: &Node) -> bool {
    a.size == b.size
        && a.content == b.content
        && a.mode == b.mode
        && a.uid == b.uid
        && a.gid == b.gid
        && a.mtime == b.mtime
        && a.target_hex == b.target_hex
        && a.rdev == b.rdev
}

async fn walk<S: Storage>(
    repo: &Repository<S>,
    a: Option<Id>,
    b: Option<Id>,
    (prefix, depth): (String, Depth),
    out: &mut Vec<Change>,
) -> Result<()> {
    if a == b {
        return Ok(());
    }
    let (left, right) = (nodes(repo, a).await?, nodes(repo, b).await?);
    let mut names: Vec<&Vec<u8>> = left.keys().chain(right.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let path = format!("{prefix}/{}", String::from_utf8_lossy(name));
        let (l, r) = (left.get(name), right.get(name));
        let dir = |n: Option<&Node>| {
            n.filter(|n| n.kind == Some(NodeType::Dir))
                .and_then(|n| n.subtree)
        };
        match (l, r) {
            (Some(_), None) => out.push(Change {
                kind: '-',
                path: path.clone(),
            }),
            (None, Some(_)) => out.push(Change {
                kind: '+',
                path: path.clone(),
            }),
            (Some(l), Some(r)) if l.kind != r.kind => out.push(Change {
                kind: 'T',
                path: path.clone(),
            }),
            (Some(l), Some(r)) if l.kind != Some(NodeType::Dir) && !same(l, r) => {
                out.push(Change {
                    kind: 'M',
                    path: path.clone(),
                });
            }
            _ => {}
        }
        // Descend into directories on either side, so added and removed trees are listed
        // entry by entry.
        let (da, db) = (dir(l), dir(r));
        if da.is_some() || db.is_some() {
            let below = depth
                .below(name)
                .map_err(|why| RepoError::Invalid(format!("{path}: {why}")))?;
            Box::pin(walk(repo, da, db, (path, below), out)).await?;
        }
    }
    Ok(())
}

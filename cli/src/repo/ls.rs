//! `kura ls SNAPSHOT [PATH]`: the entries of a snapshot, one per line or as JSON lines.

use anyhow::Result;
use std::os::unix::ffi::OsStrExt as _;

use kura_repo::{Depth, Id, NodeType, Repository, Storage};

use crate::args::LsArgs;

pub fn run(args: &LsArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (repo, _conn) = super::open(&args.repo).await?;
        let (_, snap) = super::find_snapshot(&repo, &args.snapshot, &args.filter).await?;
        let only = args
            .path
            .as_deref()
            .map(|p| p.trim_matches('/').to_string());
        let top = (String::new(), Depth::default());
        list(&repo, &snap.tree, top, only.as_deref(), args.json).await
    })
}

async fn list<S: Storage>(
    repo: &Repository<S>,
    tree: &Id,
    (prefix, depth): (String, Depth),
    only: Option<&str>,
    json: bool,
) -> Result<()> {
    for node in repo.read_tree(tree).await?.nodes {
        let path = format!("{prefix}/{}", node.name().to_string_lossy());
        let rel = path.trim_start_matches('/');
        let inside = only.is_none_or(|o| rel == o || rel.starts_with(&format!("{o}/")));
        let above = only.is_some_and(|o| o.starts_with(&format!("{rel}/")));
        if inside {
            if json {
                println!("{}", serde_json::json!({ "path": path, "node": node }));
            } else {
                let kind = match node.kind {
                    Some(NodeType::Dir) => "d",
                    Some(NodeType::Symlink) => "l",
                    Some(NodeType::File) => "-",
                    Some(NodeType::Chardev) => "c",
                    Some(NodeType::Blockdev) => "b",
                    Some(NodeType::Fifo) => "p",
                    Some(NodeType::Socket) => "s",
                    None => "?",
                };
                println!(
                    "{kind} {:o} {:>12} {path}",
                    node.mode,
                    node.size.unwrap_or(0)
                );
            }
        }
        if (inside || above)
            && let Some(sub) = &node.subtree
        {
            let below = depth
                .below(node.name().as_bytes())
                .map_err(|why| anyhow::anyhow!("{path}: {why}"))?;
            Box::pin(list(repo, sub, (path.clone(), below), only, json)).await?;
        }
    }
    Ok(())
}

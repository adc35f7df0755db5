//! `kura restore SNAPSHOT TARGET`: to a directory, or `-` for a single-file snapshot.

use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::args::RestoreArgs;

pub fn run(args: &RestoreArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (repo, _conn) = super::open(&args.repo).await?;
        let (id, snap) = super::find_snapshot(&repo, &args.snapshot, &args.filter).await?;
        if args.target == Path::new("-") {
            if args.only_changed_since.is_some() {
                bail!("--only-changed-since writes onto a device or image file, not to stdout");
            }
            // No bar: the content goes to stdout and the bar would share a terminal with it.
            let tree = repo.read_tree(&snap.tree).await?;
            let [node] = tree.nodes.as_slice() else {
                bail!(
                    "snapshot {} holds {} entries; `-` needs exactly one file",
                    id.short(),
                    tree.nodes.len()
                );
            };
            let mut out = std::io::stdout().lock();
            kura_repo::write_content(&repo, node, &mut out).await?;
            return Ok(());
        }
        // A device, or a path that is not a directory, takes a one-file snapshot's content.
        let into_file = std::fs::metadata(&args.target).is_ok_and(|m| !m.is_dir());
        if into_file {
            let tree = repo.read_tree(&snap.tree).await?;
            let [node] = tree.nodes.as_slice() else {
                bail!(
                    "{} is not a directory, and snapshot {} holds {} entries, not one file",
                    args.target.display(),
                    id.short(),
                    tree.nodes.len()
                );
            };
            if let Some(since) = &args.only_changed_since {
                return changed_since(&repo, (&id, &snap), node, since, args).await;
            }
            let size = node.size.unwrap_or(0);
            // Caught from before the temporary file beside the target exists: a signal
            // between its creation and the first wait for one killed the process and left
            // the file (seen once in a full test run).
            let mut stops = Stops::catch();
            let target = kura_repo::FileTarget::open(&args.target, node)
                .with_context(|| format!("restoring onto {}", args.target.display()))?;
            if let Some(device) = target.device_size() {
                eprintln!(
                    "kura: overwriting {} ({device} bytes) with {size} bytes of snapshot {} \
                     (host {}, paths [{}], taken {})",
                    args.target.display(),
                    id.to_hex(),
                    snap.host,
                    snap.paths.join(", "),
                    snap.time
                );
            }
            let bar = crate::progress::start(repo.progress().clone(), "restore");
            // Stopped by a signal, the restore is dropped, and with it the file it was
            // writing beside a regular file: what the target held stays, and no image-sized
            // temporary file is left (SIGKILL still leaves it).
            let in_place = target.in_place();
            let n = tokio::select! {
                n = kura_repo::restore_file_to(&repo, node, target) => n?,
                signal = stops.next() => {
                    let what = if in_place { "holds part of the image" } else { "left as it was" };
                    bail!("{signal}: {} {what}", args.target.display())
                }
            };
            drop(bar);
            eprintln!(
                "restored {n} bytes of snapshot {} onto {}",
                id.short(),
                args.target.display()
            );
            return Ok(());
        }
        if args.only_changed_since.is_some() {
            bail!(
                "--only-changed-since restores a block image onto a device or image file; {} is a directory",
                args.target.display()
            );
        }
        let bar = crate::progress::start(repo.progress().clone(), "restore");
        let include = kura_repo::Include::new(&args.include)?;
        let s = kura_repo::restore(&repo, &snap.tree, &args.target, &include)
            .await
            .with_context(|| format!("restoring snapshot {}", id.short()))?;
        drop(bar);
        report(&id, &args.target, &s)
    })
}

/// Prints what a restore of a tree wrote, says if the target's marker stays, and lists
/// what failed (then exits non-zero).
fn report(
    id: &kura_repo::Id,
    target: &std::path::Path,
    s: &kura_repo::RestoreSummary,
) -> Result<()> {
    eprintln!(
        "restored snapshot {} to {}: {} files, {} dirs, {} symlinks, {} special files, {} bytes",
        id.short(),
        target.display(),
        s.files,
        s.dirs,
        s.symlinks,
        s.special,
        s.bytes
    );
    let marker = target.join(kura_repo::UNFINISHED);
    if std::fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file()) {
        eprintln!(
            "kura: {} stays: another restore into this target still runs, or one was stopped part-way and the files it was writing may be short; a whole restore of that snapshot, begun while no other restore runs here, that writes every file takes it away (if it stays even then, it cannot be read: check the files and delete it)",
            marker.display()
        );
    }
    for p in &s.failed {
        eprintln!("kura: failed: {p}");
    }
    for p in &s.skipped {
        eprintln!("kura: not restored: {p}");
    }
    for p in &s.metadata_failed {
        eprintln!("kura: metadata not applied: {p}");
    }
    if !s.failed.is_empty() || !s.skipped.is_empty() || !s.metadata_failed.is_empty() {
        bail!(
            "{} entries failed, {} not restored and {} metadata failures (listed above)",
            s.failed.len(),
            s.skipped.len(),
            s.metadata_failed.len()
        );
    }
    Ok(())
}

/// `--only-changed-since SINCE`: the target holds snapshot SINCE of the same source; only
/// the blocks in which `snap` differs from it are written.
async fn changed_since(
    repo: &kura_repo::Repository<kura_repo::S3Storage>,
    (id, snap): (&kura_repo::Id, &kura_repo::Snapshot),
    node: &kura_repo::Node,
    since: &str,
    args: &RestoreArgs,
) -> Result<()> {
    let (since_id, since_snap) =
        super::find_snapshot(repo, since, &crate::args::FilterArgs::default()).await?;
    let (Some(new), Some(old)) = (&snap.block, &since_snap.block) else {
        bail!(
            "--only-changed-since needs two block backups; snapshot {} is not one",
            if snap.block.is_none() {
                id.short()
            } else {
                since_id.short()
            }
        );
    };
    // What a repair lost is holes in the snapshot. In the new one, set against the older
    // one's blobs, they would zero the target's copy of those blocks, maybe the only one
    // left; in the older one, beside a hole of the new one, the block would count as the
    // same and not be written, and the target would keep what it holds there.
    for (which, s) in [(id, snap), (&since_id, &since_snap)] {
        if s.incomplete || !s.errors.is_empty() {
            bail!(
                "snapshot {} is incomplete or was repaired: blocks it lost are holes in it, so \
                 the blocks that differ cannot be told; restore snapshot {} whole instead",
                which.short(),
                id.short()
            );
        }
    }
    if new.source != old.source || new.block_size != old.block_size {
        bail!(
            "snapshot {} is of source {:?}, snapshot {} of {:?}: the target cannot hold both",
            since_id.short(),
            old.source,
            id.short(),
            new.source
        );
    }
    let tree = repo.read_tree(&since_snap.tree).await?;
    let [old_node] = tree.nodes.as_slice() else {
        bail!(
            "snapshot {} holds {} entries, not one image",
            since_id.short(),
            tree.nodes.len()
        );
    };
    let before = before_since(repo, &since_snap)
        .await
        .with_context(|| format!("reading the parent of snapshot {}", since_id.short()))?;
    let target = kura_repo::FileTarget::open_in_place(&args.target, node)
        .with_context(|| format!("restoring onto {}", args.target.display()))?;
    eprintln!(
        "kura: writing onto {} the blocks in which snapshot {} differs from {}, which it must hold",
        args.target.display(),
        id.short(),
        since_id.short()
    );
    let bar = crate::progress::start(repo.progress().clone(), "restore");
    let older = (old_node, before.as_ref());
    let done = kura_repo::restore_changed_to(repo, node, older, new.block_size, target).await;
    drop(bar);
    let done = done.with_context(|| format!("restoring onto {}", args.target.display()))?;
    eprintln!(
        "restored snapshot {} onto {}: {} of {} bytes written (the rest as snapshot {} left it)",
        id.short(),
        args.target.display(),
        done.written,
        done.bytes,
        since_id.short()
    );
    Ok(())
}

/// The image of the parent of `since` (the snapshot the target holds), where it is a block
/// backup of the same source: the check of the target then also reads blocks `since`
/// changed from it, which a standby one backup behind holds wrong. `None` (no such extra
/// check) where there is no such parent, or it was forgotten; a storage error fails.
async fn before_since(
    repo: &kura_repo::Repository<kura_repo::S3Storage>,
    since: &kura_repo::Snapshot,
) -> Result<Option<kura_repo::Node>> {
    let Some(parent) = since.parent else {
        return Ok(None);
    };
    let parent = match repo.load_snapshot(&parent).await {
        Ok(p) => p,
        Err(kura_repo::RepoError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let (Some(a), Some(b)) = (&parent.block, &since.block) else {
        return Ok(None);
    };
    if a.source != b.source || a.block_size != b.block_size {
        return Ok(None);
    }
    let mut tree = repo.read_tree(&parent.tree).await?;
    Ok((tree.nodes.len() == 1).then(|| tree.nodes.remove(0)))
}

/// SIGINT and SIGTERM (what Ctrl-C and Kubernetes send), caught from the moment this is
/// made: neither ends the process any more, and [`Stops::next`] tells of them.
struct Stops(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Stops {
    fn catch() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self(
            signal(SignalKind::interrupt())
                .ok()
                .zip(signal(SignalKind::terminate()).ok()),
        )
    }

    /// Waits for the next one; names it.
    async fn next(&mut self) -> &'static str {
        let Some((int, term)) = &mut self.0 else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => "interrupted",
            _ = term.recv() => "terminated",
        }
    }
}

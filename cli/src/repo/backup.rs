//! `kura backup`: paths, `--stdin`, `--stdin-from-command -- CMD ARGS...`, or
//! `--block DEVICE`.

use anyhow::{Context as _, Result, bail};
use kura_repo::{BackupOptions, Source};

use crate::args::BackupArgs;

pub fn run(args: &BackupArgs) -> Result<()> {
    let source = if args.stdin {
        Source::Stdin {
            name: args.stdin_name.clone(),
            reader: Box::new(std::io::stdin()),
        }
    } else if args.stdin_from_command {
        if args.paths.is_empty() {
            bail!("--stdin-from-command needs a command after `--`");
        }
        Source::Command {
            name: args.stdin_name.clone(),
            argv: args
                .paths
                .iter()
                .map(|p| p.clone().into_os_string())
                .collect(),
        }
    } else if args.block {
        let [path] = args.paths.as_slice() else {
            bail!("--block takes exactly one device or image");
        };
        Source::Block(path.clone())
    } else if args.paths.is_empty() {
        bail!("nothing to back up: give paths, --stdin or --block DEVICE");
    } else {
        Source::Paths(args.paths.clone())
    };
    let host = match args.host.clone() {
        Some(h) => h,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "unknown".into(), |h| h.trim().to_string()),
    };
    let incomplete = super::runtime()?.block_on(async {
        let (mut repo, _conn) = super::open(&args.repo).await?;
        let parent = parent_of(&repo, args, &source, &host).await?;
        let opts = BackupOptions {
            host,
            tags: args.tags.clone(),
            parent,
            index_interval: None,
            block: block_options(args)?,
        };
        let bar = crate::progress::start(repo.progress().clone(), "backup");
        let result = kura_repo::backup(&mut repo, source, opts).await;
        drop(bar);
        super::warn_clock_skew(&repo);
        let (id, snap) = result.context("backup failed")?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "id": id.to_hex(), "snapshot": snap }))?);
        } else {
            let s = &snap.summary;
            println!(
                "snapshot {} saved: {} files ({} unchanged, not read), {} dirs, {} bytes read, {} bytes new ({} stored after compression)",
                id.short(),
                s.files,
                s.files_unchanged,
                s.dirs,
                s.bytes_read,
                s.bytes_added,
                s.bytes_stored
            );
        }
        for e in &snap.errors {
            eprintln!("kura: could not read {e}");
        }
        let mismatched = snap.block.as_ref().map_or(0, |b| b.mismatched.iter().map(|r| r.1).sum::<u64>());
        if let Some(b) = snap.block.as_ref().filter(|_| mismatched > 0) {
            let first = b.mismatched.first().map_or(0, |r| r.0);
            eprintln!(
                "kura: {mismatched} bytes in {} extents (the first at byte {first}) differed from what the \
                 extents file and the parent said: this snapshot holds them as read, but the earlier \
                 snapshots that trusted the extents file may hold old data there",
                b.mismatched.len()
            );
        }
        // A warning, not a failure (exit 0): the snapshot holds every file, and a busy
        // log or database would otherwise fail every scheduled run (repo/README.md).
        warn_changed(&snap);
        anyhow::Ok((snap.incomplete, mismatched))
    })?;
    let (incomplete, mismatched) = incomplete;
    if mismatched > 0 {
        bail!(
            "the verifying read found blocks the extents files missed (above); the snapshot is saved and right"
        );
    }
    if incomplete {
        bail!("the snapshot is incomplete: some files could not be read (listed above)");
    }
    Ok(())
}

/// The parent snapshot: `--parent` (`latest` as restic takes it, or for a block source the
/// newest of its `--source-id`, from any host), or by default for paths the newest of this host and
/// these paths.
async fn parent_of(
    repo: &kura_repo::Repository<kura_repo::S3Storage>,
    args: &BackupArgs,
    source: &Source,
    host: &str,
) -> Result<Option<kura_repo::Id>> {
    Ok(match (&args.parent, source) {
        // As restic: `--parent latest` is the newest of this host and these paths,
        // not of the whole repository (another volume's tree would make a poor parent).
        (Some(p), _) => {
            let within = kura_repo::SnapshotFilter {
                hosts: vec![host.to_string()],
                paths: match source {
                    Source::Paths(paths) => paths.iter().map(|p| p.display().to_string()).collect(),
                    _ => Vec::new(),
                },
                tags: Vec::new(),
            };
            // A block source's latest is the newest of its identity (the device path of
            // a thin snapshot changes every night).
            if let (Source::Block(path), "latest") = (source, p.as_str()) {
                Some(latest_of_source(repo, &source_id(args, path)).await?)
            } else {
                let filter = if p == "latest" {
                    within
                } else {
                    kura_repo::SnapshotFilter::default()
                };
                Some(super::resolve(repo, p, &filter).await?.0)
            }
        }
        (None, Source::Paths(paths)) if !args.force => {
            let given: Vec<std::ffi::OsString> =
                paths.iter().map(|p| p.clone().into_os_string()).collect();
            // Exactly these paths: two that differ only in bytes that are not UTF-8
            // read alike as text.
            let wanted = kura_repo::Snapshot::record_paths(&given);
            repo.snapshots()
                .await?
                .into_iter()
                .rev()
                .find(|(_, s)| s.host == host && (&s.paths, &s.paths_hex) == (&wanted.0, &wanted.1))
                .map(|(id, _)| id)
        }
        (None, _) => None,
    })
}

/// The identity of the block source at `path`: `--source-id`, or the path.
fn source_id(args: &BackupArgs, path: &std::path::Path) -> String {
    args.source_id
        .clone()
        .unwrap_or_else(|| path.display().to_string())
}

/// `--block`'s options: the extents file read and parsed.
fn block_options(args: &BackupArgs) -> Result<kura_repo::BlockOptions> {
    let read = |path: &std::path::Path| -> Result<kura_repo::Extents> {
        let file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        kura_repo::Extents::read(file).with_context(|| format!("reading {}", path.display()))
    };
    let map = match (&args.changed, &args.allocated) {
        (Some(p), _) => Some(kura_repo::BlockMap::Changed(read(p)?)),
        (None, Some(p)) => Some(kura_repo::BlockMap::Allocated(read(p)?)),
        (None, None) => None,
    };
    Ok(kura_repo::BlockOptions {
        source_id: args.source_id.clone(),
        map,
        verify_every: args.verify_every,
    })
}

/// The newest snapshot whose block record names `source`, from any host: the source's
/// identity is what the user named it, and a CronJob's pod has another host name each
/// night.
async fn latest_of_source(
    repo: &kura_repo::Repository<kura_repo::S3Storage>,
    source: &str,
) -> Result<kura_repo::Id> {
    repo.snapshots()
        .await?
        .into_iter()
        .rev()
        .find(|(_, s)| s.block.as_ref().is_some_and(|b| b.source == source))
        .map(|(id, _)| id)
        .with_context(|| format!("no block snapshot of source {source:?} to take as parent"))
}

/// One warning per file that changed while it was read (a warning, not a failure).
fn warn_changed(snap: &kura_repo::Snapshot) {
    for path in &snap.changed_during_backup {
        if snap.block.is_some() {
            eprintln!(
                "kura: warning: {path} was written to while it was read: stored as read (it \
                 may mix versions) and flagged; no --changed backup can build on this \
                 snapshot: back up a frozen snapshot of it"
            );
        } else {
            eprintln!(
                "kura: warning: {path} changed while it was read, twice: stored as read (it \
                 may mix versions) and flagged; the next backup reads it again"
            );
        }
    }
}

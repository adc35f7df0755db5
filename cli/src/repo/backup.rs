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
        let parent = match (&args.parent, &source) {
            // As restic: `--parent latest` is the newest of this host and these paths,
            // not of the whole repository (another volume's tree would make a poor parent).
            (Some(p), _) => {
                let within = kura_repo::SnapshotFilter {
                    hosts: vec![host.clone()],
                    paths: match &source {
                        Source::Paths(paths) => paths.iter().map(|p| p.display().to_string()).collect(),
                        _ => Vec::new(),
                    },
                    tags: Vec::new(),
                };
                let filter = if p == "latest" { within } else { kura_repo::SnapshotFilter::default() };
                Some(super::resolve(&repo, p, &filter).await?.0)
            }
            (None, Source::Paths(paths)) if !args.force => {
                let given: Vec<std::ffi::OsString> = paths.iter().map(|p| p.clone().into_os_string()).collect();
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
        };
        let opts = BackupOptions {
            host,
            tags: args.tags.clone(),
            parent,
            index_interval: None,
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
        // A warning, not a failure (exit 0): the snapshot holds every file, and a busy
        // log or database would otherwise fail every scheduled run (repo/README.md).
        for path in &snap.changed_during_backup {
            eprintln!(
                "kura: warning: {path} changed while it was read, twice: stored as read (it may \
                 mix versions) and flagged; the next backup reads it again"
            );
        }
        anyhow::Ok(snap.incomplete)
    })?;
    if incomplete {
        bail!("the snapshot is incomplete: some files could not be read (listed above)");
    }
    Ok(())
}

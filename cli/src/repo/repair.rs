//! `kura repair index [--read-data]`: rebuilds the index from the packs, naming what it
//! left out; `kura repair snapshots [--forget]`: snapshots without what was lost.

use anyhow::Result;

use crate::args::{RepairIndexArgs, RepairSnapshotsArgs};

pub fn index(args: &RepairIndexArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (mut repo, _conn) = super::open_unindexed(&args.repo).await?;
        let r = kura_repo::repair_index(&mut repo, args.read_data).await?;
        for name in &r.unreadable_indexes {
            eprintln!("kura: index object {name}: replaced");
        }
        for pack in &r.missing {
            eprintln!("kura: pack {} is indexed but not stored: left out", pack.short());
        }
        for (pack, why) in &r.damaged {
            eprintln!("kura: pack {}: {why}: left out (not deleted)", pack.short());
        }
        println!(
            "indexed {} packs ({} read, {} not indexed before) in {} index objects; removed {} old index objects",
            r.packs,
            r.packs_read,
            r.added.len(),
            r.written,
            r.removed
        );
        if !r.missing.is_empty() || !r.damaged.is_empty() {
            println!(
                "the next backup stores again what it still finds of the left-out packs' data; `kura check` names the snapshots that used them"
            );
        }
        Ok(())
    })
}

pub fn snapshots(args: &RepairSnapshotsArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (mut repo, _conn) = super::open(&args.repo).await?;
        let r = kura_repo::repair_snapshots(&mut repo, args.forget).await?;
        for line in &r.lost {
            eprintln!("kura: lost: {line}");
        }
        if r.read_elsewhere > 0 {
            eprintln!(
                "kura: {} blobs are indexed in packs that are not stored, and kept: another pack holds them; run `kura repair index` so that restores read them there",
                r.read_elsewhere
            );
        }
        for (old, new) in &r.repaired {
            println!("snapshot {} repaired as {}", old.short(), new.short());
        }
        if r.repaired.is_empty() {
            println!("no snapshot uses data the repository lost");
        } else if args.forget {
            println!("{} originals deleted; `kura prune` can run", r.forgotten);
        } else {
            println!(
                "the originals stay (prune refuses while they name lost data): forget them, or run again with --forget"
            );
        }
        Ok(())
    })
}

//! `kura repair index [--read-data]`: rebuilds the index from the packs, naming what it
//! left out.

use anyhow::Result;

use crate::args::RepairIndexArgs;

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

//! `kura prune [--grace 24h]`: marks unused packs, deletes those marked long enough ago.

use anyhow::Result;

use crate::args::PruneArgs;

pub fn run(args: &PruneArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (mut repo, _conn) = super::open(&args.repo).await?;
        let r = kura_repo::prune(&mut repo, args.grace).await?;
        for name in &r.ignored_marks {
            eprintln!(
                "kura: warning: prune mark {name} does not match its name; ignored (delete prune/{name} once checked)"
            );
        }
        println!(
            "marked {} unused packs; deleted {} packs ({} bytes) marked over {}s ago; {} marked packs are in use again",
            r.marked,
            r.deleted,
            r.deleted_bytes,
            args.grace.as_secs(),
            r.rescued
        );
        Ok(())
    })
}

//! `kura prune [--grace DURATION]`: marks unused packs, deletes those marked long enough
//! ago (the repository's grace period unless a longer one is given).

use anyhow::Result;

use crate::args::PruneArgs;

pub fn run(args: &PruneArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (mut repo, _conn) = super::open(&args.repo).await?;
        let grace = args.grace.unwrap_or(repo.config().params.grace);
        let r = kura_repo::prune(&mut repo, grace).await;
        super::warn_clock_skew(&repo);
        let r = r?;
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
            grace.as_secs(),
            r.rescued
        );
        if r.waiting > 0 {
            println!(
                "{} marked packs wait for backups that started before their mark",
                r.waiting
            );
        }
        if r.stale_sessions > 0 {
            println!(
                "removed {} stale backup sessions (backups that died or were paused past the session timeout)",
                r.stale_sessions
            );
        }
        Ok(())
    })
}

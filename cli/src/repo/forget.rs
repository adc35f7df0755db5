//! `kura forget --keep-...`: removes snapshots a retention policy does not keep.

use anyhow::Result;
use kura_repo::KeepPolicy;

use crate::args::ForgetArgs;

pub fn run(args: &ForgetArgs) -> Result<()> {
    let policy = KeepPolicy {
        last: args.keep_last,
        hourly: args.keep_hourly,
        daily: args.keep_daily,
        weekly: args.keep_weekly,
        monthly: args.keep_monthly,
        yearly: args.keep_yearly,
    };
    super::runtime()?.block_on(async {
        let (repo, _conn) = super::open(&args.repo).await?;
        let (keep, remove) = kura_repo::forget(&repo, policy, args.dry_run).await?;
        if args.json {
            let hex = |v: &[kura_repo::Id]| v.iter().map(kura_repo::Id::to_hex).collect::<Vec<_>>();
            println!("{}", serde_json::json!({ "keep": hex(&keep), "remove": hex(&remove), "dry_run": args.dry_run }));
        } else {
            let verb = if args.dry_run { "would remove" } else { "removed" };
            for id in &remove {
                println!("{verb} snapshot {}", id.short());
            }
            println!("kept {} snapshots, {verb} {}; run `kura prune` to free their data", keep.len(), remove.len());
        }
        Ok(())
    })
}

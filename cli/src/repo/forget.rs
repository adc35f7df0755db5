//! `kura forget --keep-...`: removes snapshots a retention policy does not keep, per
//! group (host and paths unless `--group-by` says otherwise), within the filters given.

use anyhow::Result;
use kura_repo::{ForgetOptions, KeepPolicy};

use crate::args::ForgetArgs;

pub fn run(args: &ForgetArgs) -> Result<()> {
    let opts = ForgetOptions {
        policy: KeepPolicy {
            last: args.keep_last,
            hourly: args.keep_hourly,
            daily: args.keep_daily,
            weekly: args.keep_weekly,
            monthly: args.keep_monthly,
            yearly: args.keep_yearly,
            within: args.keep_within,
            within_calendar: [
                args.keep_within_hourly,
                args.keep_within_daily,
                args.keep_within_weekly,
                args.keep_within_monthly,
                args.keep_within_yearly,
            ],
            tags: super::tag_lists(&args.keep_tag),
        },
        group_by: args.group_by,
        filter: super::filter(&args.filter),
        dry_run: args.dry_run,
    };
    super::runtime()?.block_on(async {
        let (repo, _conn) = super::open(&args.repo).await?;
        let report = kura_repo::forget(&repo, &opts).await?;
        let (keep, remove) = (report.kept(), report.removed());
        if args.json {
            let hex = |v: &[kura_repo::Id]| v.iter().map(kura_repo::Id::to_hex).collect::<Vec<_>>();
            println!(
                "{}",
                serde_json::json!({
                    "dry_run": args.dry_run,
                    "groups": report.groups,
                    "keep": hex(&keep),
                    "remove": hex(&remove),
                })
            );
            return Ok(());
        }
        let verb = if args.dry_run {
            "would remove"
        } else {
            "removed"
        };
        for g in &report.groups {
            println!("{}:", g.group);
            for v in &g.keep {
                let why: Vec<String> = v.reasons.iter().map(ToString::to_string).collect();
                println!("  keep   {} {} ({})", v.id.short(), v.time, why.join(", "));
            }
            for v in &g.remove {
                let note = if v.incomplete { " (incomplete)" } else { "" };
                println!("  {verb} {} {}{note}", v.id.short(), v.time);
            }
        }
        println!(
            "kept {} snapshots, {verb} {}; run `kura prune` to free their data",
            keep.len(),
            remove.len()
        );
        Ok(())
    })
}

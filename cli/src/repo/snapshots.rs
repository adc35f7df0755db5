//! `kura snapshots`: one line per snapshot, or JSON.

use anyhow::Result;

use crate::args::SnapshotsArgs;

pub fn run(args: &SnapshotsArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (repo, _conn) = super::open(&args.repo).await?;
        let all = repo.snapshots().await?;
        if args.json {
            let list: Vec<_> = all
                .iter()
                .map(|(id, s)| serde_json::json!({ "id": id.to_hex(), "snapshot": s }))
                .collect();
            println!("{}", serde_json::to_string_pretty(&list)?);
            return Ok(());
        }
        for (id, s) in &all {
            let flag = if s.incomplete { "  INCOMPLETE" } else { "" };
            let changed = match s.summary.files_changed_during_backup {
                0 => String::new(),
                n => format!("  ({n} changed while read)"),
            };
            println!(
                "{}  {}  {}  [{}]  {}{flag}{changed}",
                id.short(),
                s.time,
                s.host,
                s.tags.join(","),
                s.paths.join(" ")
            );
        }
        Ok(())
    })
}

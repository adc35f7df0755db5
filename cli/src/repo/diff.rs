//! `kura diff FROM TO`: `+`, `-`, `M` (changed) and `T` (type changed) per path.

use anyhow::Result;

use crate::args::DiffArgs;

pub fn run(args: &DiffArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (repo, _conn) = super::open(&args.repo).await?;
        let (_, from) = super::find_snapshot(&repo, &args.from, &args.filter).await?;
        let (_, to) = super::find_snapshot(&repo, &args.to, &args.filter).await?;
        for change in kura_repo::diff(&repo, &from.tree, &to.tree).await? {
            if args.json {
                println!("{}", serde_json::to_string(&change)?);
            } else {
                println!("{} {}", change.kind, change.path);
            }
        }
        Ok(())
    })
}

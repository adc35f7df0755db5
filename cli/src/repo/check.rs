//! `kura check [--read-data]`: problems and the files they affect, non-zero exit if any.

use anyhow::{Result, bail};

use crate::args::CheckArgs;

pub fn run(args: &CheckArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (mut repo, _conn) = super::open(&args.repo).await?;
        let report = kura_repo::check(&mut repo, args.read_data).await?;
        for p in &report.problems {
            eprintln!("kura: problem: {p}");
        }
        for a in &report.affected {
            eprintln!("kura: affected: {a}");
        }
        if !report.is_clean() {
            bail!(
                "{} problems, {} affected files or directories",
                report.problems.len(),
                report.affected.len()
            );
        }
        if args.read_data {
            println!(
                "no errors: {} packs read, {} blobs verified",
                report.packs_read, report.blobs_verified
            );
        } else {
            println!("no errors (structure only; --read-data reads every blob)");
        }
        Ok(())
    })
}

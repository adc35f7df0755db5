//! `kura stats`: snapshots, blobs, and bytes before and after compression and in storage.

use anyhow::Result;
use kura_repo::{FileType, Storage as _};

use crate::args::StatsArgs;

pub fn run(args: &StatsArgs) -> Result<()> {
    super::runtime()?.block_on(async {
        let (repo, _conn) = super::open(&args.repo).await?;
        let snapshots = repo.snapshots().await?.len();
        let (blobs, raw, stored) = repo.index().totals();
        let packs = repo.storage().list(FileType::Pack).await?;
        let pack_bytes: u64 = packs.iter().map(|(_, size)| size).sum();
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "snapshots": snapshots, "blobs": blobs, "raw_bytes": raw,
                    "stored_blob_bytes": stored, "packs": packs.len(), "pack_bytes": pack_bytes,
                })
            );
        } else {
            println!("snapshots: {snapshots}");
            println!("blobs: {blobs} ({raw} bytes, {stored} after compression)");
            println!(
                "packs: {} ({pack_bytes} bytes, before the gateway encrypts them)",
                packs.len()
            );
        }
        Ok(())
    })
}

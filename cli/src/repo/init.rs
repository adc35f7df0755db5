//! `kura init`: creates the bucket if needed and writes the repository's `config`.

use anyhow::{Context as _, Result};
use kura_repo::{Params, Repository};

use crate::args::InitArgs;

pub fn run(args: &InitArgs) -> Result<()> {
    let mut params = Params::default();
    params.chunker.avg = args.chunk_kib.saturating_mul(1024);
    params.chunker.min = params.chunker.avg / 4;
    params.chunker.max = params.chunker.avg.saturating_mul(4);
    params.block_size = args.block_kib.saturating_mul(1024);
    params.pack_size = args.pack_mib.saturating_mul(1 << 20);
    params.grace = args.grace;
    params.session_timeout = args.session_timeout;
    super::runtime()?.block_on(async {
        let conn = super::connect(&args.repo).await?;
        conn.storage
            .ensure_bucket()
            .await
            .context("creating the bucket")?;
        let repo = Repository::init(conn.storage.clone(), params)
            .await
            .with_context(|| format!("initializing {}", conn.repository))?;
        println!(
            "created repository {} at {}",
            repo.config().id,
            conn.repository
        );
        Ok(())
    })
}

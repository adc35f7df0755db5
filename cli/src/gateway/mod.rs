//! `kura gateway`: raw flags and config file become a checked `GatewayConfig`
//! (`config.rs`), the embedded default is prepared on first start (`embedded.rs`), then
//! the gateway serves until SIGINT or SIGTERM and drains in-flight requests.

mod config;
mod embedded;

use anyhow::Context as _;

use crate::args::GatewayArgs;

pub fn run(args: GatewayArgs) -> anyhow::Result<()> {
    init_logging(&args.log_format)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let config = config::build(args)?;
        let running = kura_gateway::server::start(config).await?;
        println!("kura gateway: serving S3 on {}", running.addr);
        wait_for_signal().await;
        tracing::info!("shutting down: draining in-flight requests");
        running.shutdown().await;
        Ok(())
    })
}

fn init_logging(format: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KURA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        "json" => builder.json().init(),
        "text" => builder.init(),
        other => anyhow::bail!("--log-format must be text or json, not {other:?}"),
    }
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = ctrl_c.await;
            return;
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

//! `kura gateway`: raw flags and config file become a checked `GatewayConfig`
//! (`config.rs`; the embedded default's directory is `kura_gateway::embedded`), then the
//! gateway serves until SIGINT or SIGTERM and drains in-flight requests, reading its key
//! file and TLS certificate again on SIGHUP and when they change.

mod config;

pub use config::in_process;

use anyhow::Context as _;

use crate::args::GatewayArgs;

pub fn run(args: GatewayArgs) -> anyhow::Result<()> {
    let file = config::load_file(args.config.as_ref())?;
    let log_format = args
        .log_format
        .clone()
        .or_else(|| file.log_format.clone())
        .unwrap_or_else(|| "text".into());
    init_logging(&log_format)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.worker_threads.or(file.worker_threads) {
        builder.worker_threads(n.max(1));
    }
    let runtime = builder
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let (config, key_file) = config::build(args, file)?;
        let mut running = kura_gateway::server::start(config).await?;
        // A rotated key file or renewed certificate is taken on SIGHUP and when it changes.
        running.reload_on_change(
            Some(kura_gateway::reload::KeySource {
                path: key_file,
                load: config::key_loader(),
            }),
            true,
        );
        println!("kura gateway: serving S3 on {}", running.addr);
        wait_for_signal().await;
        tracing::info!("shutting down: draining in-flight requests");
        running.shutdown().await;
        Ok(())
    })
}

fn init_logging(format: &str) -> anyhow::Result<()> {
    use tracing_subscriber::filter::{FilterExt as _, filter_fn};
    use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
    use tracing_subscriber::util::SubscriberInitExt as _;
    let asked = tracing_subscriber::EnvFilter::try_from_env("KURA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // s3s logs whole requests (Authorization headers, presigned signatures) and the
    // signature it expected at debug level: never let those reach a log. A filter of its
    // own, beside what KURA_LOG asks: a directive there more specific than any guard
    // (`s3s::service=debug`) or one for a span (`[request]=debug`) would win over it.
    let no_s3s_debug = filter_fn(|meta| {
        !(meta.target().starts_with("s3s") && *meta.level() > tracing::Level::INFO)
    });
    let filter = asked.and(no_s3s_debug);
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry();
    match format {
        "json" => registry.with(layer.json().with_filter(filter)).init(),
        "text" => registry.with(layer.with_filter(filter)).init(),
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

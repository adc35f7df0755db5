//! Flags and config file to a checked `GatewayConfig`: flags win over the file, the file
//! over defaults; secrets are resolved from their files or variables here, once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::io::IsTerminal as _;

use anyhow::{Context as _, bail};
use kura_gateway::config::{
    BucketScope, ClientCredential, DEFAULT_UPSTREAM_TIMEOUT, FileConfig, GatewayConfig, Limits,
    TlsFiles, UpstreamConfig,
};
use kura_gateway::embedded::EmbeddedDir;
use kura_keys::{Cipher, Keyring};

use crate::args::GatewayArgs;

const DEFAULT_LISTEN: &str = "127.0.0.1:9000";

pub fn load_file(path: Option<&PathBuf>) -> anyhow::Result<FileConfig> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    let text = zeroize::Zeroizing::new(text);
    toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "config {}: {}",
            path.display(),
            kura_keys::keyfile::describe_toml_error(&e, &text)
        )
    })
}

fn load_keyring(path: &std::path::Path) -> anyhow::Result<Keyring> {
    crate::keys::load_key_file(path)
}

/// The checked config, and the key file its keys came from (which the gateway reloads).
pub fn build(
    args: GatewayArgs,
    file: FileConfig,
) -> anyhow::Result<(GatewayConfig, std::path::PathBuf)> {
    let listen = args
        .listen
        .or(file.listen)
        .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default"));
    let cipher_name = args
        .cipher
        .clone()
        .or(file.cipher.clone())
        .unwrap_or_else(|| "aes-256-gcm".into());
    let cipher = Cipher::from_name(&cipher_name)
        .with_context(|| format!("unknown cipher {cipher_name:?}"))?;
    let upstream_url = args.upstream.clone().or(file.upstream.url.clone());
    let key_file = args.key_file.clone().or(file.key_file.clone());
    let mut credentials = Vec::new();
    for c in &file.credentials {
        let secret = c
            .secret
            .resolve(&format!("credential {}", c.access_key_id))?;
        let powers = kura_gateway::powers::Powers::parse(&c.powers)
            .map_err(|e| anyhow::anyhow!("credential {}: {e}", c.access_key_id))?;
        credentials.push(ClientCredential {
            access_key: c.access_key_id.clone(),
            secret: secret.expose().to_owned().into(),
            buckets: BucketScope::from_list(&c.buckets),
            powers,
        });
    }
    match (
        std::env::var("KURA_ACCESS_KEY_ID"),
        std::env::var("KURA_SECRET_ACCESS_KEY"),
    ) {
        (Ok(ak), Ok(sk)) => credentials.push(ClientCredential {
            access_key: ak,
            secret: sk.into(),
            buckets: BucketScope::All,
            powers: kura_gateway::powers::Powers::default(),
        }),
        (Err(_), Err(_)) => {}
        // The repository commands take the ID from the variable and the secret from their
        // config file: an environment set up for them names a key the gateway's file has.
        (Ok(ak), Err(_)) if file.credentials.iter().any(|c| c.access_key_id == ak) => {}
        // Half a credential would be dropped, and the embedded default would then use
        // or generate others: say so instead.
        (Ok(ak), Err(_)) => bail!(
            "KURA_ACCESS_KEY_ID ({ak}) is set without KURA_SECRET_ACCESS_KEY: the gateway \
             needs both, or a [[credentials]] entry for {ak} in its config file"
        ),
        (Err(_), Ok(_)) => {
            bail!("KURA_SECRET_ACCESS_KEY is set without KURA_ACCESS_KEY_ID: the two go together")
        }
    }
    let key_path = key_path(&args, &file, key_file.as_ref(), upstream_url.as_ref());
    let (upstream, keyring, generated) =
        upstream_and_keyring(&args, &file, upstream_url, key_file, credentials.is_empty())?;
    credentials.extend(generated);
    if credentials.is_empty() {
        bail!(
            "no client credentials: add [[credentials]] to the config file or set KURA_ACCESS_KEY_ID and KURA_SECRET_ACCESS_KEY"
        );
    }
    let tls = match (
        args.tls_cert.or(file.tls_cert),
        args.tls_key.or(file.tls_key),
    ) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        (None, None) => None,
        _ => bail!("--tls-cert and --tls-key go together"),
    };
    if tls.is_none() && !listen.ip().is_loopback() {
        tracing::warn!(%listen, "serving plain HTTP on a non-loopback address: use --tls-cert/--tls-key unless a sidecar or mesh terminates TLS");
    }
    let admin_listen = args.admin_listen.or(file.admin_listen);
    if let Some(admin) = admin_listen.filter(|a| !a.ip().is_loopback()) {
        // The admin listener never has TLS; its paths need no credentials.
        tracing::warn!(%admin, "serving /healthz, /readyz and /metrics on a non-loopback address without credentials or TLS: keep it reachable only by probes and the scraper");
    }
    let mut limits = Limits::default();
    match args.max_connections.or(file.max_connections) {
        Some(0) => bail!("max_connections must be at least 1"),
        Some(n) => limits.max_connections = n,
        None => {}
    }
    match args.idle_timeout.or(file.idle_timeout) {
        Some(0) => bail!("the idle timeout is in seconds and must be at least 1"),
        Some(secs) => limits.idle_timeout = Duration::from_secs(secs),
        None => {}
    }
    let config = GatewayConfig {
        listen,
        admin_listen,
        upstream,
        keyring: Arc::new(keyring),
        cipher,
        credentials,
        tls,
        virtual_host_domain: args.virtual_host_domain.or(file.virtual_host_domain),
        limits,
    };
    Ok((config, key_path))
}

/// The key file the gateway's keys come from: the one named, else the embedded default's.
fn key_path(
    args: &GatewayArgs,
    file: &FileConfig,
    named: Option<&std::path::PathBuf>,
    upstream_url: Option<&String>,
) -> std::path::PathBuf {
    match (
        named,
        upstream_url,
        args.data_dir.as_ref().or(file.data_dir.as_ref()),
    ) {
        (Some(path), _, _) => path.clone(),
        (None, None, Some(dir)) => EmbeddedDir::new(dir).default_key_file(),
        // upstream_and_keyring refuses these.
        (None, _, _) => std::path::PathBuf::new(),
    }
}

/// How the gateway reads its key file again (`kura_gateway::reload`): as at start, with a
/// sealed file's passphrase from `KURA_KEY_PASSPHRASE` (no terminal to ask at then).
pub fn key_loader() -> kura_gateway::reload::KeyLoader {
    Arc::new(|path: &std::path::Path| {
        let text = std::fs::read_to_string(path)
            .map(zeroize::Zeroizing::new)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let sealed = kura_keys::keyfile::is_sealed(&text).map_err(|e| e.to_string())?;
        if sealed && std::env::var_os("KURA_KEY_PASSPHRASE").is_none() {
            return Err("the key file is sealed and KURA_KEY_PASSPHRASE is not set".into());
        }
        load_keyring(path).map_err(|e| format!("{e:#}"))
    })
}

/// The upstream and the key file, from flags over file: S3 with a key file, or the
/// embedded default on a directory (which generates credentials when `need_credentials`).
fn upstream_and_keyring(
    args: &GatewayArgs,
    file: &FileConfig,
    upstream_url: Option<String>,
    key_file: Option<std::path::PathBuf>,
    need_credentials: bool,
) -> anyhow::Result<(UpstreamConfig, Keyring, Vec<ClientCredential>)> {
    if let Some(url) = upstream_url {
        let key_file = key_file.context("--key-file is required with --upstream")?;
        let region = args
            .upstream_region
            .clone()
            .or(file.upstream.region.clone())
            .unwrap_or_else(|| "us-east-1".into());
        let static_creds = match &file.upstream.access_key_id {
            Some(ak) => Some((ak.clone(), file.upstream.secret.resolve("upstream")?)),
            // Dropping the secret would fall back to the AWS chain, which may find another
            // identity (a node's instance role): say so instead.
            None if file.upstream.secret.is_given() => {
                bail!("[upstream] gives a secret but no access_key_id")
            }
            None => None,
        };
        if args.data_dir.is_some() || file.data_dir.is_some() {
            bail!(
                "a data directory (--data-dir or data_dir) is for the embedded upstream; with an upstream URL it would be ignored"
            );
        }
        let timeout = match args.upstream_timeout.or(file.upstream.timeout) {
            None => DEFAULT_UPSTREAM_TIMEOUT,
            Some(0) => bail!("the upstream timeout is in seconds and must be at least 1"),
            Some(secs) => Duration::from_secs(secs),
        };
        if let Some(warning) = plain_http_upstream_warning(&url) {
            tracing::warn!("{warning}");
        }
        let upstream = UpstreamConfig::S3 {
            url,
            region,
            path_style: args
                .path_style
                .or(file.upstream.path_style)
                .unwrap_or(false),
            ca_bundle: args
                .upstream_ca_bundle
                .clone()
                .or(file.upstream.ca_bundle.clone()),
            credentials: static_creds,
            timeout,
        };
        Ok((upstream, load_keyring(&key_file)?, Vec::new()))
    } else {
        let ignored = upstream_only_settings(args, file);
        if !ignored.is_empty() {
            bail!(
                "{} only apply with an upstream URL (--upstream or [upstream] url); without one the embedded upstream is used",
                ignored.join(", ")
            );
        }
        let dir = args
            .data_dir
            .clone()
            .or(file.data_dir.clone())
            .context("give --data-dir (embedded upstream) or --upstream URL")?;
        let (upstream, keyring, credentials) = prepare_embedded(
            &EmbeddedDir::new(&dir),
            key_file.as_deref(),
            need_credentials,
        )?;
        Ok((upstream, keyring, credentials))
    }
}

/// The embedded default on first start: makes its directory, generates the key file and
/// (when `need_credentials`) a client credential, and tells the operator about both.
fn prepare_embedded(
    dir: &EmbeddedDir,
    key_file: Option<&std::path::Path>,
    need_credentials: bool,
) -> anyhow::Result<(UpstreamConfig, Keyring, Vec<ClientCredential>)> {
    let (key_path, generated) = dir.prepare(key_file)?;
    if generated {
        eprintln!(
            "\n!!! kura: generated a NEW KEY FILE at {}\n!!! Everything stored through this gateway is encrypted with it.\n!!! BACK IT UP NOW, away from {}: without it nothing can be decrypted.\n",
            key_path.display(),
            dir.root().display()
        );
    }
    let keyring = load_keyring(&key_path)?;
    let mut credentials = Vec::new();
    if need_credentials {
        let stored = dir.client_credential()?;
        let path = dir.credentials_file();
        // Standard output is a pod's log unless it is a terminal: the secret goes to a
        // person at a terminal, never into a log.
        if stored.generated && std::io::stdout().is_terminal() {
            println!(
                "kura gateway: client credentials (also in {}):\n  AWS_ACCESS_KEY_ID={}\n  AWS_SECRET_ACCESS_KEY={}",
                path.display(),
                stored.credential.access_key,
                stored.credential.secret.expose()
            );
        } else if stored.generated {
            println!(
                "kura gateway: generated client credentials for access key {}; the secret is in {}",
                stored.credential.access_key,
                path.display()
            );
        } else {
            println!("kura gateway: client credentials are in {}", path.display());
        }
        credentials.push(stored.credential);
    }
    Ok((
        UpstreamConfig::Local {
            dir: dir.objects_dir(),
        },
        keyring,
        credentials,
    ))
}

/// What to warn of when the upstream is reached over plain HTTP beyond this host: object
/// bodies and metadata stay sealed, but names, sizes and the requests themselves cross the
/// network in the clear, where they can be read, replayed or answered by someone else.
fn plain_http_upstream_warning(url: &str) -> Option<String> {
    (!kura_repo::endpoint_is_protected(url)).then(|| {
        format!(
            "the upstream {url} is plain HTTP beyond this host: object names, sizes and requests travel in the clear and can be tampered with; use https"
        )
    })
}

/// The upstream settings given, by name, which mean nothing without an upstream URL.
fn upstream_only_settings(args: &GatewayArgs, file: &FileConfig) -> Vec<&'static str> {
    let up = &file.upstream;
    [
        ("--upstream-region", args.upstream_region.is_some()),
        ("--path-style", args.path_style.is_some()),
        ("--upstream-ca-bundle", args.upstream_ca_bundle.is_some()),
        ("--upstream-timeout", args.upstream_timeout.is_some()),
        ("[upstream] region", up.region.is_some()),
        ("[upstream] path_style", up.path_style.is_some()),
        ("[upstream] ca_bundle", up.ca_bundle.is_some()),
        ("[upstream] timeout", up.timeout.is_some()),
        ("[upstream] access_key_id", up.access_key_id.is_some()),
        ("[upstream] secret", up.secret.is_given()),
    ]
    .into_iter()
    .filter_map(|(name, given)| given.then_some(name))
    .collect()
}

/// The upstream and key file for a gateway that one `kura` command starts in-process
/// (`kura backup` and friends without --endpoint): the embedded default on `--data-dir`,
/// or `--upstream` with a key file.
pub fn in_process(args: &GatewayArgs) -> anyhow::Result<(UpstreamConfig, Keyring)> {
    let file = FileConfig::default();
    let (upstream, keyring, _) = upstream_and_keyring(
        args,
        &file,
        args.upstream.clone(),
        args.key_file.clone(),
        false,
    )?;
    Ok((upstream, keyring))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// The gateway flags as `kura gateway` would parse them.
    fn flags(argv: &[&str]) -> GatewayArgs {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            gateway: GatewayArgs,
        }
        T::try_parse_from(std::iter::once("t").chain(argv.iter().copied()))
            .unwrap()
            .gateway
    }

    /// The path style the upstream gets from these flags over this config file.
    fn path_style(argv: &[&str], file_text: &str) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("keys.toml");
        let keyring = Keyring::generate("test".into()).unwrap();
        keyring
            .save(&key_file, None, kura_keys::keyfile::Existing::Refuse)
            .unwrap();
        let file: FileConfig = toml::from_str(file_text).unwrap();
        let url = Some("http://upstream:9000".to_string());
        let (upstream, _, _) =
            upstream_and_keyring(&flags(argv), &file, url, Some(key_file), false).unwrap();
        let UpstreamConfig::S3 { path_style, .. } = upstream else {
            panic!("an S3 upstream was configured")
        };
        path_style
    }

    #[test]
    fn path_style_flags_win_over_the_file_either_way() {
        let file_on = "[upstream]\npath_style = true\n";
        let file_off = "[upstream]\npath_style = false\n";
        assert!(!path_style(&[], ""), "virtual-host style by default");
        assert!(path_style(&["--path-style"], ""));
        assert!(path_style(&[], file_on));
        assert!(!path_style(&["--path-style=false"], file_on));
        assert!(path_style(&["--path-style=true"], file_off));
    }

    #[test]
    fn a_config_file_that_does_not_parse_is_described_without_quoting_its_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kura.toml");
        let secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY";
        std::fs::write(
            &path,
            format!("[[credentials]]\naccess_key_id = \"a\"\nsecret_acess_key = \"{secret}\"\nbuckets = [\"*\"]\n"),
        )
        .unwrap();
        let err = format!("{:#}", load_file(Some(&path)).unwrap_err());
        assert!(!err.contains(secret), "{err}");
        assert!(err.contains("secret_acess_key"), "names the field: {err}");
        // With flattened secret fields toml places the error at the table, not the line.
        assert!(err.contains("(line 1, column 1)"), "says where: {err}");
    }

    #[test]
    fn only_a_plain_http_upstream_off_this_host_is_warned_about() {
        for quiet in [
            "https://s3.us-west-004.backblazeb2.com",
            "http://127.0.0.1:3900",
            "http://localhost:9000",
            "http://[::1]:9000",
        ] {
            assert!(plain_http_upstream_warning(quiet).is_none(), "{quiet}");
        }
        for loud in ["http://minio.storage.svc:9000", "http://10.0.0.5:9000"] {
            let warning = plain_http_upstream_warning(loud).expect(loud);
            assert!(warning.contains(loud), "{warning}");
        }
    }
}

//! Where a repository command stores: flags and environment (clap) over a TOML config file
//! over defaults, checked into one [`Target`] before anything connects.
//!
//! The file is `--config` / `KURA_CONFIG`, else `$XDG_CONFIG_HOME/kura/config.toml` (or
//! `~/.config/kura/config.toml`) when that exists:
//!
//! ```toml
//! repository = "s3://backups/cluster-a"
//! endpoint = "http://127.0.0.1:9000"          # a running kura gateway, or:
//! # upstream = "https://s3.us-west-004.backblazeb2.com"   # an in-process gateway
//! # upstream_region = "us-west-004"
//! # path_style = false
//! # key_file = "/etc/kura/keys.toml"
//! # data_dir = "/var/lib/kura"                # neither: the embedded default
//! access_key_id = "backup-node-1"
//! secret_access_key_file = "/run/secrets/kura" # or secret_access_key(_env)
//! retry_for = "5m"                            # retry transient failures this long
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use kura_gateway::config::SecretSource;
use kura_keys::secret::Secret;
use serde::Deserialize;

use crate::args::RepoArgs;

/// The embedded default's directory when nothing names one.
const DEFAULT_DATA_DIR: &str = "kura-data";

/// The config file as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct RepoFile {
    /// `s3://BUCKET/PREFIX`.
    pub repository: Option<String>,
    /// URL of a running kura gateway.
    pub endpoint: Option<String>,
    /// Gateway access key ID (with `endpoint`).
    pub access_key_id: Option<String>,
    /// Its secret (with `endpoint`).
    #[serde(flatten)]
    pub secret: SecretSource,
    /// Upstream S3 service for an in-process gateway.
    pub upstream: Option<String>,
    /// Region to sign for upstream.
    pub upstream_region: Option<String>,
    /// Path-style upstream requests.
    pub path_style: Option<bool>,
    /// Key file of the in-process gateway.
    pub key_file: Option<PathBuf>,
    /// Directory of the embedded default.
    pub data_dir: Option<PathBuf>,
    /// How long a request is retried while it fails transiently (`90s`, `5m`; `0` never).
    pub retry_for: Option<String>,
}

/// How to reach the repository, checked.
pub enum Target {
    /// A running gateway.
    Endpoint {
        url: String,
        access_key: String,
        /// Resolved here, once; never printed (`Debug` leaves it out).
        secret: Secret,
    },
    /// A gateway started in this process in front of an S3 upstream.
    Upstream {
        url: String,
        region: Option<String>,
        path_style: bool,
        key_file: Option<PathBuf>,
    },
    /// A gateway started in this process on the embedded default's directory.
    Embedded { data_dir: PathBuf },
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Endpoint {
                url, access_key, ..
            } => f
                .debug_struct("Endpoint")
                .field("url", url)
                .field("access_key", access_key)
                .finish_non_exhaustive(),
            Self::Upstream {
                url,
                region,
                path_style,
                key_file,
            } => f
                .debug_struct("Upstream")
                .field("url", url)
                .field("region", region)
                .field("path_style", path_style)
                .field("key_file", key_file)
                .finish(),
            Self::Embedded { data_dir } => f
                .debug_struct("Embedded")
                .field("data_dir", data_dir)
                .finish(),
        }
    }
}

/// The checked location of a repository.
#[derive(Debug)]
pub struct Location {
    /// `s3://BUCKET/PREFIX`, as given.
    pub repository: String,
    pub target: Target,
    /// How long a request is retried while it fails transiently.
    pub retry_for: std::time::Duration,
}

/// Reads the config file (when there is one) and merges it under the flags.
pub fn resolve(args: &RepoArgs) -> anyhow::Result<Location> {
    let file = match config_path(args.config.as_deref()) {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading config {}", path.display()))?;
            toml::from_str(&text).map_err(|e| {
                anyhow::anyhow!(
                    "config {}: {}",
                    path.display(),
                    kura_keys::keyfile::describe_toml_error(&e, &text)
                )
            })?
        }
        None => RepoFile::default(),
    };
    merge(args, file, std::env::var("KURA_SECRET_ACCESS_KEY").ok())
}

/// `--config`, else the per-user default when it exists.
fn config_path(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    let path = base.join("kura/config.toml");
    path.exists().then_some(path)
}

/// Flags (and their environment variables) win over the file. Which kind of target is
/// chosen by the flags first: `--endpoint`, `--upstream` or `--data-dir` on the command line
/// overrides whatever the file selects.
fn merge(args: &RepoArgs, file: RepoFile, env_secret: Option<String>) -> anyhow::Result<Location> {
    let Some(repository) = args.repo.clone().or(file.repository) else {
        bail!(
            "no repository: give --repo s3://BUCKET/PREFIX, KURA_REPOSITORY or `repository` in the config file"
        );
    };
    let endpoint = if args.upstream.is_some() || args.data_dir.is_some() {
        args.endpoint.clone()
    } else {
        args.endpoint.clone().or(file.endpoint)
    };
    let target = if let Some(url) = endpoint {
        let access_key = args.access_key_id.clone().or(file.access_key_id).context(
            "an endpoint needs an access key: --access-key-id, KURA_ACCESS_KEY_ID or `access_key_id` in the config file",
        )?;
        let secret = match env_secret {
            Some(s) => Secret::new(s),
            None => file
                .secret
                .resolve("the gateway secret")
                .map_err(|e| anyhow::anyhow!("{e}; or set KURA_SECRET_ACCESS_KEY"))?,
        };
        Target::Endpoint {
            url,
            access_key,
            secret,
        }
    } else if let Some(url) = args.upstream.clone().or(if args.data_dir.is_some() {
        None
    } else {
        file.upstream
    }) {
        Target::Upstream {
            url,
            region: args.upstream_region.clone().or(file.upstream_region),
            path_style: args.path_style.or(file.path_style).unwrap_or(false),
            key_file: args.key_file.clone().or(file.key_file),
        }
    } else {
        Target::Embedded {
            data_dir: args
                .data_dir
                .clone()
                .or(file.data_dir)
                .unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
        }
    };
    let retry_for = match (args.retry_for, file.retry_for) {
        (Some(d), _) => d,
        (None, Some(text)) => crate::args::parse_duration(&text)
            .map_err(|e| anyhow::anyhow!("config `retry_for`: {e}"))?,
        (None, None) => kura_repo::DEFAULT_RETRY_FOR,
    };
    Ok(Location {
        repository,
        target,
        retry_for,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// The repository flags as `kura snapshots` would parse them.
    fn flags(argv: &[&str]) -> RepoArgs {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            repo: RepoArgs,
        }
        T::try_parse_from(std::iter::once("t").chain(argv.iter().copied()))
            .unwrap()
            .repo
    }

    fn file(text: &str) -> RepoFile {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_file_alone_names_repository_endpoint_and_credential() {
        let loc = merge(
            &flags(&[]),
            file(
                "repository = \"s3://b/p\"\nendpoint = \"http://gw:9000\"\naccess_key_id = \"ak\"\nsecret_access_key = \"sk\"\n",
            ),
            None,
        )
        .unwrap();
        let shown = format!("{loc:?}");
        assert!(
            shown.contains("gw:9000") && !shown.contains("\"sk\""),
            "{shown}"
        );
        assert_eq!(loc.repository, "s3://b/p");
        let Target::Endpoint {
            url,
            access_key,
            secret,
        } = loc.target
        else {
            panic!("{:?}", loc.target)
        };
        assert_eq!(
            (url.as_str(), access_key.as_str()),
            ("http://gw:9000", "ak")
        );
        assert_eq!(secret.expose(), "sk");
    }

    #[test]
    fn flags_and_environment_win_over_the_file() {
        let loc = merge(
            &flags(&["--repo", "s3://flag/x", "--access-key-id", "flag-ak"]),
            file(
                "repository = \"s3://b/p\"\nendpoint = \"http://gw:9000\"\naccess_key_id = \"ak\"\nsecret_access_key = \"sk\"\n",
            ),
            Some("env-secret".into()),
        )
        .unwrap();
        assert_eq!(loc.repository, "s3://flag/x");
        let Target::Endpoint {
            access_key, secret, ..
        } = loc.target
        else {
            panic!()
        };
        assert_eq!(access_key, "flag-ak");
        assert_eq!(secret.expose(), "env-secret");
    }

    #[test]
    fn a_target_flag_overrides_the_kind_of_target_the_file_selects() {
        let f =
            "repository = \"s3://b/p\"\nendpoint = \"http://gw:9000\"\nupstream = \"http://up\"\n";
        let loc = merge(&flags(&["--data-dir", "/d"]), file(f), None).unwrap();
        assert!(
            matches!(loc.target, Target::Embedded { ref data_dir } if data_dir == Path::new("/d"))
        );
        let loc = merge(&flags(&["--upstream", "http://other"]), file(f), None).unwrap();
        assert!(matches!(loc.target, Target::Upstream { ref url, .. } if url == "http://other"));
    }

    #[test]
    fn the_file_can_select_an_in_process_gateway_or_the_embedded_default() {
        let loc = merge(
            &flags(&[]),
            file("repository = \"s3://b\"\nupstream = \"http://up\"\nkey_file = \"/k\"\npath_style = true\n"),
            None,
        )
        .unwrap();
        let Target::Upstream {
            url,
            path_style,
            key_file,
            ..
        } = loc.target
        else {
            panic!()
        };
        assert_eq!(url, "http://up");
        assert!(path_style);
        assert_eq!(key_file.as_deref(), Some(Path::new("/k")));
        let loc = merge(&flags(&["--repo", "s3://b"]), RepoFile::default(), None).unwrap();
        assert!(
            matches!(loc.target, Target::Embedded { ref data_dir } if data_dir == Path::new("kura-data"))
        );
    }

    #[test]
    fn missing_pieces_are_named() {
        let err = merge(&flags(&[]), RepoFile::default(), None).unwrap_err();
        assert!(err.to_string().contains("no repository"), "{err}");
        let err = merge(
            &flags(&["--repo", "s3://b", "--endpoint", "http://gw"]),
            RepoFile::default(),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("access key"), "{err}");
        let err = merge(
            &flags(&[
                "--repo",
                "s3://b",
                "--endpoint",
                "http://gw",
                "--access-key-id",
                "a",
            ]),
            RepoFile::default(),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("KURA_SECRET_ACCESS_KEY"), "{err}");
    }

    #[test]
    fn unknown_keys_in_the_file_are_refused() {
        assert!(toml::from_str::<RepoFile>("repo = \"s3://b\"\n").is_err());
    }
}

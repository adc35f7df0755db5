//! The command line as clap parses it: raw values, no checks beyond their types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// kura: encrypted, deduplicated backups for Kubernetes, through a transparent S3 gateway.
#[derive(Parser, Debug)]
#[command(name = "kura", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Manage key files and decrypt objects offline.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Run the encrypting S3 gateway.
    Gateway(Box<GatewayArgs>),
    /// Create a repository (through a gateway).
    Init(InitArgs),
    /// Back up paths, a stream on stdin, or a block device or image.
    Backup(BackupArgs),
    /// List snapshots.
    Snapshots(SnapshotsArgs),
    /// Restore a snapshot to a directory, or a single-file snapshot to stdout (`-`).
    Restore(RestoreArgs),
    /// List the files of a snapshot.
    Ls(LsArgs),
    /// What changed between two snapshots.
    Diff(DiffArgs),
    /// Sizes and counts of the repository.
    Stats(StatsArgs),
    /// Check the repository; with --read-data, read and verify every blob.
    Check(CheckArgs),
    /// Delete snapshots by a retention policy (their data goes with `kura prune`).
    Forget(ForgetArgs),
    /// Remove data no snapshot uses: marks now, deletes marks older than --grace.
    Prune(PruneArgs),
    /// Rebuild what a damaged repository needs to work again.
    #[command(subcommand)]
    Repair(RepairCommand),
}

#[derive(Subcommand, Debug)]
pub enum RepairCommand {
    /// Rebuild the index objects from the packs' own headers.
    Index(RepairIndexArgs),
    /// Write new snapshots without the data the repository lost (tagged `repaired`).
    Snapshots(RepairSnapshotsArgs),
}

#[derive(Args, Debug)]
pub struct RepairSnapshotsArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Delete each original once its repaired snapshot is stored.
    #[arg(long)]
    pub forget: bool,
}

#[derive(Args, Debug)]
pub struct RepairIndexArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Read every pack whole and index only packs whose every blob verifies (a damaged
    /// pack's blobs are then stored again by the next backup).
    #[arg(long)]
    pub read_data: bool,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Snapshot ID (or a unique prefix), or `latest` (as for `restore`).
    pub snapshot: String,
    /// Only this path (relative to the snapshot root) and what is below it.
    pub path: Option<String>,
    /// Print JSON lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Both snapshots are resolved among those these match.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// The older snapshot (ID prefix or `latest`).
    pub from: String,
    /// The newer snapshot.
    pub to: String,
    /// Print JSON lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Read every pack through the gateway and hash every blob.
    #[arg(long)]
    pub read_data: bool,
}

/// Which snapshots a command looks at (restic's filters): a snapshot must match every
/// kind given.
#[derive(Args, Debug, Default)]
pub struct FilterArgs {
    /// Only snapshots of this host (repeatable: any of them).
    #[arg(long = "host", id = "filter_host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Only snapshots that include this path, as `kura snapshots` shows it (repeatable:
    /// all of them); a stream's is `-:NAME`.
    #[arg(
        long = "path",
        id = "filter_path",
        value_name = "PATH",
        allow_hyphen_values = true
    )]
    pub paths: Vec<String>,
    /// Only snapshots with these tags, `a,b` for both (repeatable: any of the lists).
    #[arg(long = "tag", id = "filter_tag", value_name = "TAGS")]
    pub tags: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ForgetArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Apply the rules per group of snapshots sharing these: a comma list of host, paths,
    /// tags; `''` makes one group of all.
    #[arg(long, default_value = "host,paths", value_name = "LIST")]
    pub group_by: kura_repo::GroupBy,
    /// Keep the newest N snapshots (per group).
    #[arg(long, default_value_t = 0)]
    pub keep_last: u32,
    /// Keep the newest snapshot of each of the last N hours.
    #[arg(long, default_value_t = 0)]
    pub keep_hourly: u32,
    /// ... days.
    #[arg(long, default_value_t = 0)]
    pub keep_daily: u32,
    /// ... weeks.
    #[arg(long, default_value_t = 0)]
    pub keep_weekly: u32,
    /// ... months.
    #[arg(long, default_value_t = 0)]
    pub keep_monthly: u32,
    /// ... years.
    #[arg(long, default_value_t = 0)]
    pub keep_yearly: u32,
    /// Keep every snapshot newer than the group's newest minus SPAN, restic's form:
    /// `1y2m3d4h` (years, months, days, hours; `m` is months).
    #[arg(long, value_name = "SPAN")]
    pub keep_within: Option<kura_repo::Within>,
    /// Keep the newest snapshot of each hour within SPAN of the group's newest.
    #[arg(long, value_name = "SPAN")]
    pub keep_within_hourly: Option<kura_repo::Within>,
    /// ... of each day.
    #[arg(long, value_name = "SPAN")]
    pub keep_within_daily: Option<kura_repo::Within>,
    /// ... of each week.
    #[arg(long, value_name = "SPAN")]
    pub keep_within_weekly: Option<kura_repo::Within>,
    /// ... of each month.
    #[arg(long, value_name = "SPAN")]
    pub keep_within_monthly: Option<kura_repo::Within>,
    /// ... of each year.
    #[arg(long, value_name = "SPAN")]
    pub keep_within_yearly: Option<kura_repo::Within>,
    /// Keep snapshots with these tags, `a,b` for both (repeatable: any of the lists).
    #[arg(long, value_name = "TAGS")]
    pub keep_tag: Vec<String>,
    /// Show per group what would be kept (and by which rule) and removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PruneArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// How long a mark waits before its packs are deleted: the repository's grace period
    /// (set at init, 24h by default) unless this is longer; shorter is refused.
    #[arg(long, value_parser = parse_duration)]
    pub grace: Option<std::time::Duration>,
}

/// `90s`, `15m`, `24h`, `7d`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number and s, m, h or d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{s:?}: unit must be s, m, h or d")),
    };
    Ok(std::time::Duration::from_secs(secs))
}

/// Where the repository is. It is only ever reached through a kura gateway: the one at
/// --endpoint, or one started in this process (in front of --upstream with --key-file, or
/// the embedded default on --data-dir).
#[derive(Args, Debug)]
pub struct RepoArgs {
    /// Config file (TOML) with any of the settings below [default:
    /// $XDG_CONFIG_HOME/kura/config.toml when it exists]; flags and environment win.
    #[arg(long, env = "KURA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Repository location, `s3://BUCKET/PREFIX` (config: `repository`).
    #[arg(long, env = "KURA_REPOSITORY")]
    pub repo: Option<String>,
    /// URL of the kura gateway to store through (config: `endpoint`).
    #[arg(long, env = "KURA_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Gateway access key ID, needed with an endpoint (config: `access_key_id`). Its secret
    /// comes from `KURA_SECRET_ACCESS_KEY` or the config file's `secret_access_key`,
    /// `secret_access_key_file` or `secret_access_key_env`, never from a flag, so that it
    /// never shows in a process list.
    #[arg(long, env = "KURA_ACCESS_KEY_ID")]
    pub access_key_id: Option<String>,
    /// Without an endpoint: the upstream S3 service for an in-process gateway (config:
    /// `upstream`).
    #[arg(long, conflicts_with = "endpoint")]
    pub upstream: Option<String>,
    /// With an upstream: region to sign for [default: us-east-1] (config:
    /// `upstream_region`).
    #[arg(long)]
    pub upstream_region: Option<String>,
    /// With an upstream: path-style requests (config: `path_style`); `--path-style=false`
    /// overrides the file's `true`.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub path_style: Option<bool>,
    /// Key file of the in-process gateway, required with an upstream (config: `key_file`).
    #[arg(long, env = "KURA_KEY_FILE", conflicts_with = "endpoint")]
    pub key_file: Option<PathBuf>,
    /// Without an endpoint or upstream: the embedded default's directory [default:
    /// kura-data] (config: `data_dir`).
    #[arg(long, env = "KURA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// How long each request to the gateway is retried while it fails transiently (it
    /// restarts, is overloaded or unreachable), with backoff; `0` never retries [default:
    /// 5m] (config: `retry_for`).
    #[arg(long, env = "KURA_RETRY_FOR", value_parser = parse_duration)]
    pub retry_for: Option<std::time::Duration>,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Average chunk size for files and streams, in KiB (min is a quarter, max four times).
    #[arg(long, default_value_t = 1024)]
    pub chunk_kib: u32,
    /// Fixed chunk size for block devices and images, in KiB.
    #[arg(long, default_value_t = 1024)]
    pub block_kib: u32,
    /// Target pack size, in MiB.
    #[arg(long, default_value_t = 16)]
    pub pack_mib: u32,
    /// The shortest time a prune mark waits before its packs are deleted; `kura prune
    /// --grace` may lengthen it, never shorten it.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub grace: std::time::Duration,
    /// How long a running backup's session stays live without a refresh: a backup paused
    /// or cut off from the storage for longer keeps no snapshot.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub session_timeout: std::time::Duration,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("stream").args(["stdin", "stdin_from_command"])))]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each is a command-line switch"
)]
pub struct BackupArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Files and directories; with --block, one device or image; with
    /// --stdin-from-command, the command and its arguments (after `--`).
    pub paths: Vec<PathBuf>,
    /// Read one stream from stdin.
    #[arg(long, conflicts_with_all = ["paths", "block"])]
    pub stdin: bool,
    /// Run the command given after `--` and store its standard output as one stream; the
    /// snapshot is written only if the command exits 0.
    #[arg(long, conflicts_with_all = ["stdin", "block"])]
    pub stdin_from_command: bool,
    /// The file name of the stream in the snapshot.
    #[arg(long, default_value = "stdin", requires = "stream")]
    pub stdin_name: String,
    /// The path is a block device or image: fixed chunks, zero chunks stored as holes;
    /// an image file's holes are not read.
    #[arg(long)]
    pub block: bool,
    /// With --block and --parent: read only the extents this file says changed since the
    /// parent (`thin_delta` XML, CSI GetMetadataDelta records as JSON or the lister's
    /// table, or `OFFSET LENGTH` lines); the other blocks keep the parent's data.
    #[arg(long, value_name = "EXTENTS", requires_all = ["block", "parent"], conflicts_with = "allocated")]
    pub changed: Option<PathBuf>,
    /// With --block: read only the extents this file says are allocated (`thin_dump`
    /// XML of the one thin device, CSI GetMetadataAllocated records, or `OFFSET LENGTH`
    /// lines); the rest is stored as zeros without being read.
    #[arg(long, value_name = "EXTENTS", requires = "block")]
    pub allocated: Option<PathBuf>,
    /// With --block: the source's identity, which an incremental's parent must share
    /// (the origin volume's name, where each night's snapshot has its own device path)
    /// [default: the path].
    #[arg(long, value_name = "ID", requires = "block")]
    pub source_id: Option<String>,
    /// With --changed or --allocated: read every block on every Nth backup in a row that
    /// trusted an extents file (counted through --parent), compare with what the file and
    /// the parent said, and store and report any difference.
    #[arg(long, value_name = "N", requires = "block", value_parser = clap::value_parser!(u32).range(1..))]
    pub verify_every: Option<u32>,
    /// Tag the snapshot (repeatable).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Host name recorded in the snapshot [default: this machine's].
    #[arg(long)]
    pub host: Option<String>,
    /// Parent snapshot: unchanged files (size, mtime, ctime, inode) are not read again
    /// [default: the newest snapshot of the same host and paths].
    #[arg(long)]
    pub parent: Option<String>,
    /// Read every file, with no parent.
    #[arg(long, conflicts_with = "parent")]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SnapshotsArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Snapshot ID (or a unique prefix), or `latest`: the newest of those the filters
    /// match, refused when they are of more than one host and paths.
    pub snapshot: String,
    /// Target directory (created if missing); or, for a one-file snapshot (stdin,
    /// --block), an existing block device or file to write it onto, or `-` for stdout.
    pub target: PathBuf,
    /// Restore only entries matching this glob (a path from the snapshot root, e.g.
    /// `data/app`, `data/*.log`, `**/*.yaml`) and what is below them; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// The block device (or image) still holds this older snapshot of the same source:
    /// write only the blocks in which the two differ (up to 16 shared blocks, 16 shared
    /// holes and 16 shared blocks it changed from its own parent are read back first to
    /// check that it does; two snapshots that share none are refused).
    #[arg(long, value_name = "SNAPSHOT", conflicts_with = "include")]
    pub only_changed_since: Option<String>,
}

/// `kura gateway`: every flag has a config-file key of the same name (with `_`), and a
/// flag wins over the file.
///
/// Without --upstream the gateway stores into a local directory (--data-dir), creating a
/// key file and client credentials there on first start.
#[derive(Args, Debug, Default)]
pub struct GatewayArgs {
    /// TOML config file (see gateway/README.md for every key).
    #[arg(long, env = "KURA_GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to serve S3 on [default: 127.0.0.1:9000].
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// Separate address for /healthz, /readyz and /metrics; --listen then leaves those paths
    /// to S3 (a bucket may be called `metrics`).
    #[arg(long)]
    pub admin_listen: Option<std::net::SocketAddr>,
    /// Embedded upstream: store ciphertext in this directory (used when no --upstream).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Upstream S3 endpoint URL (Backblaze B2, AWS S3, MinIO, Garage).
    #[arg(long)]
    pub upstream: Option<String>,
    /// Region to sign upstream requests for [default: us-east-1].
    #[arg(long)]
    pub upstream_region: Option<String>,
    /// Path-style upstream requests; `--path-style=false` overrides the file's `true`.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub path_style: Option<bool>,
    /// Extra CA bundle (PEM) to trust for the upstream's TLS.
    #[arg(long)]
    pub upstream_ca_bundle: Option<PathBuf>,
    /// Seconds one attempt of an upstream call may take before it is retried, for calls
    /// that answer in about a round trip (all but uploads and server-side copies)
    /// [default: 30].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub upstream_timeout: Option<u64>,
    /// Key file (with --upstream, required; embedded: defaults to DATA_DIR/kura-keys.toml).
    #[arg(long, env = "KURA_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Cipher for new objects: aes-256-gcm or chacha20-poly1305.
    #[arg(long)]
    pub cipher: Option<String>,
    /// TLS certificate chain (PEM); with --tls-key, serve HTTPS.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Base domain (with port) for virtual-host-style requests: BUCKET.DOMAIN.
    #[arg(long)]
    pub virtual_host_domain: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long)]
    pub log_format: Option<String>,
    /// Worker threads [default: one per CPU core].
    #[arg(long, env = "KURA_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// Client connections served at once; more are answered 503 SlowDown [default: 512].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Seconds a client connection may send or read nothing it owes (a request head, the
    /// rest of a body, a response) before it is closed [default: 30].
    #[arg(long)]
    pub idle_timeout: Option<u64>,
}

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Generate a new key file with one random key.
    Generate {
        /// Where to write the key file (refuses to overwrite).
        #[arg(long)]
        out: PathBuf,
        /// Seal the key file under a passphrase (from `KURA_KEY_PASSPHRASE`, or asked on the terminal).
        #[arg(long)]
        passphrase: bool,
    },
    /// List the keys in a key file (IDs and key checks; never secrets).
    List {
        #[command(flatten)]
        key_file: KeyFileArg,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Add a new random key to a key file and make it the active one.
    Rotate {
        #[command(flatten)]
        key_file: KeyFileArg,
        /// Add the key without making it active: for several gateways, each of which must
        /// hold it before any seals with it; `kura keys activate` then makes it active.
        #[arg(long)]
        inactive: bool,
    },
    /// Make a key of a key file the active one (the second step of `rotate --inactive`).
    Activate {
        #[command(flatten)]
        key_file: KeyFileArg,
        /// The key's ID, as `kura keys list` shows it.
        id: String,
    },
    /// Encrypt stdin into a kura object on stdout, as the gateway would store it.
    Encrypt {
        #[command(flatten)]
        key_file: KeyFileArg,
        #[command(flatten)]
        object: ObjectArgs,
        /// Cipher for the object: aes-256-gcm or chacha20-poly1305.
        #[arg(long, default_value = "aes-256-gcm")]
        cipher: String,
    },
    /// Decrypt an object downloaded straight from the upstream bucket, with nothing else running.
    Decrypt {
        #[command(flatten)]
        key_file: KeyFileArg,
        #[command(flatten)]
        object: ObjectArgs,
        /// Only plaintext bytes A to B (inclusive), as in an HTTP range: `A-B`, `A-` or `-N`.
        #[arg(long, allow_hyphen_values = true)]
        range: Option<String>,
        /// Read the object from this file instead of stdin.
        #[arg(long, short)]
        input: Option<PathBuf>,
        /// Recover an irregular multipart object whose layout trailer was never written (its
        /// completion failed in the rewrite): its part lengths go unchecked, so a writer of
        /// the bucket could have put back or appended parts undetected (keys/SPEC.md 8).
        #[arg(long)]
        unchecked_part_lengths: bool,
    },
}

#[derive(Args, Debug)]
pub struct KeyFileArg {
    /// The key file. A sealed one asks for its passphrase (or reads `KURA_KEY_PASSPHRASE`).
    #[arg(long, env = "KURA_KEY_FILE")]
    pub key_file: PathBuf,
}

#[derive(Args, Debug)]
pub struct ObjectArgs {
    /// Bucket the object was written to (through the gateway).
    #[arg(long)]
    pub bucket: String,
    /// Object key the object was written under.
    #[arg(long)]
    pub key: String,
}

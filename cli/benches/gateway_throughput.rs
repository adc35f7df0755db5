//! PUT and GET of one large object through `kura gateway` (a separate process) and
//! directly to the same upstream, in one run; then rounds (`KURA_BENCH_ROUNDS`, default 5)
//! that move the same bytes as one object and as several at once (`KURA_BENCH_STREAMS`,
//! default 8) directly, through the gateway and through a plain forwarder (socat). Prints
//! throughput, the ratio, the gateway's CPU seconds per GiB moved, the medians over the
//! rounds with the gateway's cost above the forwarder's, and the growth of its resident
//! memory.
//!
//! `cargo bench -p kura --bench gateway_throughput` (1 GiB; `KURA_BENCH_MIB=5117` for the
//! memory check at the largest single PUT kura accepts, just under 5 GiB). The upstream is
//! an S3 server over loopback HTTP, served by this process (see `main` for which); the
//! client is aws-sdk-s3. Last, a gateway on the embedded default (`--data-dir`, the same
//! store in-process) is measured against that upstream. Results go in `gateway/README.md`.

#![allow(missing_docs, reason = "a bench binary")]
#![allow(
    clippy::cast_precision_loss,
    reason = "throughput figures are approximate by nature"
)]

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::primitives::ByteStream;
use common::kura_bin;
use futures::StreamExt as _;
use kura_testkit::net::free_port;
use kura_testkit::process::{gateway_command, spawn_ready};
use kura_testkit::upstream::{UP_AK, UP_SK, serve};

mod common;

const AK: &str = "bench-client";
const SK: &str = "bench-client-secret";

async fn serve_upstream(dir: &Path, plain_s3s_fs: bool) -> SocketAddr {
    if plain_s3s_fs {
        serve(s3s_fs::FileSystem::new(dir).unwrap()).await
    } else {
        serve(kura_gateway::upstream::LocalDir::new(dir).unwrap()).await
    }
}

/// How the bench's client sends a PUT body.
#[derive(Clone, Copy)]
enum Put {
    /// A streaming body: aws-sdk-s3 sends `UNSIGNED-PAYLOAD` with Content-Length (as aws-cli
    /// and boto3 do over HTTPS for parts, and kura's repository over loopback).
    Unsigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: every chunk signed (SHA-256 of its
    /// bytes) and a CRC32 trailer, as aws-sdk-s3 sends over plain HTTP when asked for
    /// checksums; minio-go (restic, Kopia) signs chunks the same way. (Over plain HTTP the SDK
    /// will not send aws-cli's `STREAMING-UNSIGNED-PAYLOAD-TRAILER`, so that mode is not here.)
    SignedChunks,
    /// A body in memory, which aws-sdk-s3 signs whole: `x-amz-content-sha256` is its
    /// SHA-256, which the gateway computes to verify.
    Signed,
}

impl Put {
    fn label(self) -> &'static str {
        match self {
            Put::Unsigned => "PUT UNSIGNED-PAYLOAD          ",
            Put::SignedChunks => "PUT signed chunks + CRC32     ",
            Put::Signed => "PUT signed payload (SHA-256)  ",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Put::Unsigned => "unsigned",
            Put::SignedChunks => "signed-chunks",
            Put::Signed => "signed",
        }
    }
}

fn client(addr: SocketAddr, ak: &str, sk: &str, mode: Put) -> Client {
    let checksums = if matches!(mode, Put::SignedChunks) {
        RequestChecksumCalculation::WhenSupported
    } else {
        RequestChecksumCalculation::WhenRequired
    };
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(format!("http://{addr}"))
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(ak, sk, None, None, "bench"))
        .request_checksum_calculation(checksums)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .build();
    Client::from_conf(conf)
}

/// Fields of `/proc/PID/stat` after the command name, in seconds: index 11 is `utime`,
/// 12 `stime`, 13 `cutime` and 14 `cstime` (reaped children's), all in clock ticks.
fn stat_seconds(pid: u32, fields: &[usize]) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let all: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields
        .iter()
        .map(|&i| all[i].parse::<f64>().unwrap())
        .sum::<f64>()
        / 100.0
}

/// User CPU seconds of a process.
fn user_cpu(pid: u32) -> f64 {
    stat_seconds(pid, &[11])
}

/// (user + system CPU seconds, resident KiB, peak resident KiB) of a process.
fn usage(pid: u32) -> (f64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse()
            .unwrap()
    };
    (stat_seconds(pid, &[11, 12]), kib("VmRSS:"), kib("VmHWM:"))
}

/// CPU seconds of a process and its descendants, those still running and those it has
/// reaped (socat forks one per connection; a closed one's time moves to the parent's
/// `cutime` and `cstime`). Running processes are read from `schedstat` in nanoseconds:
/// eight connections' children each rounded down to whole clock ticks would hide up to
/// 80 ms.
fn tree_cpu(pid: u32) -> f64 {
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let running_ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    running_ns as f64 / 1e9
        + stat_seconds(pid, &[13, 14])
        + children
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .map(tree_cpu)
            .sum::<f64>()
}

/// A byte-level TCP forwarder (socat, 1 MiB buffers) in front of `upstream`, if socat is
/// installed: the least any proxy on this loopback pays to receive and resend the bytes.
fn start_forwarder(upstream: SocketAddr) -> Option<(Child, SocketAddr)> {
    let port = free_port();
    let child = Command::new("socat")
        .args([
            "-b",
            "1048576",
            &format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"),
            &format!("TCP:{upstream}"),
        ])
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Some((child, addr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Starts `kura gateway` in front of `upstream`, or on its embedded store in `dir` when
/// there is none.
fn start_gateway(upstream: Option<SocketAddr>, dir: &Path) -> (Child, SocketAddr) {
    let key_file = dir.join("keys.toml");
    if !key_file.exists() {
        let status = Command::new(kura_bin())
            .args(["keys", "generate", "--out"])
            .arg(&key_file)
            .status()
            .unwrap();
        assert!(status.success());
    }
    // KURA_BENCH_GATEWAY_BIN runs another build as the gateway, for A/B comparisons.
    let bin = std::env::var_os("KURA_BENCH_GATEWAY_BIN").map_or_else(kura_bin, PathBuf::from);
    let (mut command, port) = gateway_command(&bin);
    match upstream {
        Some(upstream) => {
            command.args(["--upstream", &format!("http://{upstream}"), "--path-style"])
        }
        None => command.arg("--data-dir").arg(dir.join("embedded")),
    };
    command
        .arg("--key-file")
        .arg(&key_file)
        .env("AWS_ACCESS_KEY_ID", UP_AK)
        .env("AWS_SECRET_ACCESS_KEY", UP_SK)
        .env("KURA_ACCESS_KEY_ID", AK)
        .env("KURA_SECRET_ACCESS_KEY", SK)
        .env("KURA_LOG", "warn")
        .stdout(Stdio::null());
    let child = spawn_ready(&mut command, port);
    (child, SocketAddr::from(([127, 0, 0, 1], port)))
}

async fn put(c: &Client, bucket: &str, key: &str, file: &Path, mode: Put) -> Duration {
    let body = if matches!(mode, Put::Signed) {
        // Read before the clock starts: only an in-memory body gets a signed payload.
        ByteStream::from(std::fs::read(file).unwrap())
    } else {
        ByteStream::from_path(file).await.unwrap()
    };
    let t = Instant::now();
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(body)
        .send()
        .await
        .unwrap();
    t.elapsed()
}

/// GETs the object, whole or (`ranged`) with one `Range` over all of it, as a ranged reader
/// such as aws-cli asks for pieces of it: the gateway then opens it segment by segment.
async fn get(c: &Client, bucket: &str, key: &str, len: u64, ranged: bool) -> Duration {
    let t = Instant::now();
    let req = c.get_object().bucket(bucket).key(key);
    let req = if ranged {
        req.range(format!("bytes=0-{}", len - 1))
    } else {
        req
    };
    let out = req.send().await.unwrap();
    let mut body = out.body.into_async_read();
    let mut n = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let r = tokio::io::AsyncReadExt::read(&mut body, &mut buf)
            .await
            .unwrap();
        if r == 0 {
            break;
        }
        n += r as u64;
    }
    assert_eq!(n, len);
    t.elapsed()
}

/// PUTs `streams` objects at once, each `part` bytes of `file` (`UNSIGNED-PAYLOAD`), then
/// GETs them all at once; returns each phase's time and what `cpu` (a process's CPU
/// seconds) grew by over it. Each request runs as a task of its own, so the client's work
/// spreads over the runtime's threads.
async fn parallel(
    c: &Client,
    bucket: &str,
    file: &Path,
    part: u64,
    streams: u64,
    cpu: &dyn Fn() -> f64,
) -> [(Duration, f64); 2] {
    let cpu0 = cpu();
    let t = Instant::now();
    let puts: Vec<_> = (0..streams)
        .map(|i| {
            let (c, bucket, file) = (c.clone(), bucket.to_owned(), file.to_owned());
            tokio::spawn(async move {
                let body = ByteStream::read_from()
                    .path(&file)
                    .offset(i * part)
                    .length(aws_sdk_s3::primitives::Length::Exact(part))
                    .build()
                    .await
                    .unwrap();
                c.put_object()
                    .bucket(bucket)
                    .key(format!("stream-{i}"))
                    .body(body)
                    .send()
                    .await
                    .unwrap();
            })
        })
        .collect();
    for p in puts {
        p.await.unwrap();
    }
    let put = (t.elapsed(), cpu() - cpu0);
    let cpu0 = cpu();
    let t = Instant::now();
    let gets: Vec<_> = (0..streams)
        .map(|i| {
            let (c, bucket) = (c.clone(), bucket.to_owned());
            tokio::spawn(async move { get(&c, &bucket, &format!("stream-{i}"), part, false).await })
        })
        .collect();
    for g in gets {
        g.await.unwrap();
    }
    let get = (t.elapsed(), cpu() - cpu0);
    for i in 0..streams {
        delete(c, bucket, &format!("stream-{i}")).await;
    }
    [put, get]
}

/// One way to the upstream (direct, through the gateway, through the forwarder) and what
/// each round measured on it: per fan-out (1 stream, many), the PUT's and the GET's time and
/// the CPU seconds its proxy process spent.
struct Route {
    name: &'static str,
    client: Client,
    bucket: &'static str,
    pid: Option<u32>,
    runs: [Vec<[(Duration, f64); 2]>; 2],
}

impl Route {
    fn new(name: &'static str, client: Client, bucket: &'static str, pid: Option<u32>) -> Self {
        let runs = [Vec::new(), Vec::new()];
        Self {
            name,
            client,
            bucket,
            pid,
            runs,
        }
    }
}

/// "median unit [least-most]" of `f` over `xs`.
fn spread(xs: &[f64], f: impl Fn(f64) -> f64, unit: &str) -> String {
    let mut v: Vec<f64> = xs.iter().map(|&x| f(x)).collect();
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        f64::midpoint(v[v.len() / 2 - 1], v[v.len() / 2])
    };
    let (lo, hi) = (v[0], v[v.len() - 1]);
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    if lo.abs() >= 10.0 {
        format!("{median:.0}{unit} [{lo:.0}-{hi:.0}]")
    } else {
        format!("{median:.2}{unit} [{lo:.2}..{hi:.2}]")
    }
}

async fn delete(c: &Client, bucket: &str, key: &str) {
    c.delete_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap();
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

#[allow(
    clippy::too_many_lines,
    reason = "one measurement script, read top to bottom"
)]
#[tokio::main]
async fn main() {
    let mib: u64 = std::env::var("KURA_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let len = mib << 20;
    let work =
        tempfile::tempdir_in(std::env::var("KURA_BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))
            .unwrap();
    let up_dir = work.path().join("upstream");
    std::fs::create_dir_all(&up_dir).unwrap();
    // s3s-fs reads objects in 4 KiB pieces (about 80 MB/s per GET here); by default the
    // upstream serves reads with kura's LocalDir instead (same files, 1 MiB reads), so that
    // the gateway's own cost is what the figures show. KURA_BENCH_S3S_FS=1 uses plain s3s-fs.
    let plain = std::env::var("KURA_BENCH_S3S_FS").is_ok_and(|v| v == "1");
    let upstream = serve_upstream(&up_dir, plain).await;
    let (mut gw, gw_addr) = start_gateway(Some(upstream), work.path());
    let file = work.path().join("data");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut chunk = vec![0u8; 1 << 20];
        for _ in 0..mib {
            for b in chunk.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.copy_from_slice(&x.to_le_bytes());
            }
            f.write_all(&chunk).unwrap();
        }
    }
    let direct = client(upstream, UP_AK, UP_SK, Put::Unsigned);
    let via = client(gw_addr, AK, SK, Put::Unsigned);
    direct
        .create_bucket()
        .bucket("direct-bench")
        .send()
        .await
        .unwrap();
    via.create_bucket()
        .bucket("gateway-bench")
        .send()
        .await
        .unwrap();
    let pid = gw.id();
    let perf = std::env::var("KURA_BENCH_PERF")
        .ok()
        .map(|out| record_profile(pid, &out));
    let gib = len as f64 / f64::from(1u32 << 30);
    let (_, rss0, _) = usage(pid);
    println!(
        "object: {mib} MiB, upstream: {kind} over loopback HTTP, client: aws-sdk-s3",
        kind = if plain {
            "s3s-fs"
        } else {
            "s3s-fs with LocalDir reads"
        }
    );
    let row = |label: &str, d: Duration, g: Duration, cpu: f64, user: f64| {
        println!(
            "{label} direct {:>7.1} MB/s  via gateway {:>7.1} MB/s  ratio {:.2}  gateway CPU {:.3} s/GiB (user space {:.3})",
            mbps(len, d),
            mbps(len, g),
            d.as_secs_f64() / g.as_secs_f64(),
            cpu / gib,
            user / gib,
        );
    };
    let modes = match std::env::var("KURA_BENCH_PUT").as_deref() {
        Ok("unsigned") => vec![Put::Unsigned],
        _ => vec![Put::Unsigned, Put::SignedChunks, Put::Signed],
    };
    for mode in modes {
        let key = mode.key();
        let d = put(
            &client(upstream, UP_AK, UP_SK, mode),
            "direct-bench",
            key,
            &file,
            mode,
        )
        .await;
        let via = client(gw_addr, AK, SK, mode);
        let (cpu0, _, _) = usage(pid);
        let user0 = user_cpu(pid);
        let g = put(&via, "gateway-bench", key, &file, mode).await;
        let (cpu1, _, _) = usage(pid);
        if !matches!(mode, Put::Unsigned) {
            // Only the first is read back; the others need not fill the disk.
            delete(&direct, "direct-bench", key).await;
            delete(&via, "gateway-bench", key).await;
        }
        row(mode.label(), d, g, cpu1 - cpu0, user_cpu(pid) - user0);
    }
    for (label, ranged) in [
        ("GET                           ", false),
        ("GET with a Range over it all  ", true),
    ] {
        let d_get = get(&direct, "direct-bench", "unsigned", len, ranged).await;
        let (cpu0, _, _) = usage(pid);
        let user0 = user_cpu(pid);
        let g_get = get(&via, "gateway-bench", "unsigned", len, ranged).await;
        let (cpu1, _, _) = usage(pid);
        row(label, d_get, g_get, cpu1 - cpu0, user_cpu(pid) - user0);
    }
    delete(&direct, "direct-bench", "unsigned").await;
    delete(&via, "gateway-bench", "unsigned").await;
    let streams: u64 = std::env::var("KURA_BENCH_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
        .max(1);
    let rounds: usize = std::env::var("KURA_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let forwarder = start_forwarder(upstream);
    let mut paths = vec![
        Route::new("direct", direct.clone(), "direct-bench", None),
        Route::new("gateway", via.clone(), "gateway-bench", Some(pid)),
    ];
    if let Some((fwd, addr)) = &forwarder {
        let c = client(*addr, UP_AK, UP_SK, Put::Unsigned);
        paths.push(Route::new("socat", c, "direct-bench", Some(fwd.id())));
    }
    // Each round moves the bytes once per path, as 1 object and as `streams` objects at
    // once; the order of the paths turns each round, so that none always comes first
    // (the first writes of a round may pay the VM's page faults, see `embedded`).
    for round in 0..rounds {
        for (n, fan) in [1, streams].into_iter().enumerate() {
            let count = paths.len();
            for k in 0..count {
                let p = &mut paths[(round + k) % count];
                let cpu = |pid: Option<u32>| move || pid.map_or(0.0, tree_cpu);
                let r = parallel(&p.client, p.bucket, &file, len / fan, fan, &cpu(p.pid)).await;
                p.runs[n].push(r);
            }
        }
    }
    let moved = |fan: u64| (len / fan) * fan;
    println!("{rounds} interleaved rounds (median, and the range in brackets), UNSIGNED-PAYLOAD:");
    for (n, fan) in [1, streams].into_iter().enumerate() {
        let gib = moved(fan) as f64 / f64::from(1u32 << 30);
        for (phase, label) in ["PUT", "GET"].into_iter().enumerate() {
            let secs = |p: &Route| -> Vec<f64> {
                p.runs[n].iter().map(|r| r[phase].0.as_secs_f64()).collect()
            };
            let direct_secs = secs(&paths[0]);
            let mut line = format!(
                "{fan} stream(s), {label}: direct {}",
                spread(&direct_secs, |s| moved(fan) as f64 / s / 1e6, "MB/s")
            );
            for p in &paths[1..] {
                let ratios: Vec<f64> = secs(p)
                    .iter()
                    .zip(&direct_secs)
                    .map(|(s, d)| d / s)
                    .collect();
                let cpu: Vec<f64> = p.runs[n].iter().map(|r| r[phase].1 / gib).collect();
                write!(
                    line,
                    "; {} {}, {} of direct, {}",
                    p.name,
                    spread(&secs(p), |s| moved(fan) as f64 / s / 1e6, "MB/s"),
                    spread(&ratios, |r| r, ""),
                    spread(&cpu, |c| c, "s/GiB"),
                )
                .unwrap();
            }
            println!("{line}");
            if let [_, gw, fwd] = &paths[..] {
                // Per round, so that a round where the machine was slow for both counts once.
                let above: Vec<f64> = gw.runs[n]
                    .iter()
                    .zip(&fwd.runs[n])
                    .map(|(g, f)| (g[phase].1 - f[phase].1) / gib)
                    .collect();
                println!(
                    "{fan} stream(s), {label}: gateway CPU above socat's {}",
                    spread(&above, |a| a, "s/GiB")
                );
            }
        }
    }
    let (_, _, hwm) = usage(pid);
    println!(
        "(CPU is user + kernel time; the kernel part is mostly the proxy's two loopback sockets per request)"
    );
    println!(
        "gateway resident memory: {} MiB at start, peak {} MiB, growth {} MiB",
        rss0 / 1024,
        hwm / 1024,
        hwm.saturating_sub(rss0) / 1024
    );
    if let Some((mut fwd, _)) = forwarder {
        let _ = fwd.kill();
        let _ = fwd.wait();
    }
    stop_profile(perf);
    let _ = gw.kill();
    let _ = gw.wait();
    embedded(upstream, work.path(), &file, len).await;
    let _ = futures::stream::iter([()]).next().await;
}

/// The embedded default: the gateway keeps the ciphertext in its own directory with
/// `LocalDir` (the store the bench's upstream serves, unless `KURA_BENCH_S3S_FS=1`), so
/// there is no upstream hop. Direct is the bench's upstream over loopback, measured again
/// next to it.
///
/// Here the gateway itself writes the page cache, and on this virtual machine a write into
/// memory the guest freed more than a moment ago pays the host's fault again (free page
/// reporting; a 1 GiB `dd` took 2.1 s of kernel time, and 0.33 s right after the file
/// was removed, whose pages it took again). Of two PUTs in a row the second paid it in
/// these runs, so the PUTs run twice, in both orders, and each side's shortest time and
/// least CPU (perhaps of different rounds) are printed. The GETs run once.
async fn embedded(upstream: SocketAddr, work: &Path, file: &Path, len: u64) {
    let gib = len as f64 / f64::from(1u32 << 30);
    let (mut gw, addr) = start_gateway(None, work);
    let pid = gw.id();
    let perf = std::env::var("KURA_BENCH_PERF")
        .ok()
        .map(|out| record_profile(pid, &format!("{out}.embedded")));
    let direct = client(upstream, UP_AK, UP_SK, Put::Unsigned);
    let via = client(addr, AK, SK, Put::Unsigned);
    via.create_bucket()
        .bucket("embedded-bench")
        .send()
        .await
        .unwrap();
    let (mut d, mut g, mut put_cpu) = (Duration::MAX, Duration::MAX, f64::MAX);
    for round in 0..2 {
        if round > 0 {
            delete(&direct, "direct-bench", "again").await;
            delete(&via, "embedded-bench", "unsigned").await;
        }
        for side in [round, 1 - round] {
            if side == 0 {
                d = d.min(put(&direct, "direct-bench", "again", file, Put::Unsigned).await);
            } else {
                let cpu0 = usage(pid).0;
                g = g.min(put(&via, "embedded-bench", "unsigned", file, Put::Unsigned).await);
                put_cpu = put_cpu.min(usage(pid).0 - cpu0);
            }
        }
    }
    let d_get = get(&direct, "direct-bench", "again", len, false).await;
    let cpu2 = usage(pid).0;
    let g_get = get(&via, "embedded-bench", "unsigned", len, false).await;
    let cpu3 = usage(pid).0;
    for (label, d, g, cpu) in [
        ("PUT UNSIGNED-PAYLOAD", d, g, put_cpu),
        ("GET                 ", d_get, g_get, cpu3 - cpu2),
    ] {
        println!(
            "embedded store: {label} direct {:>7.1} MB/s  via gateway {:>7.1} MB/s  ratio {:.2}  gateway CPU {:.3} s/GiB (store's work included)",
            mbps(len, d),
            mbps(len, g),
            d.as_secs_f64() / g.as_secs_f64(),
            cpu / gib,
        );
    }
    stop_profile(perf);
    delete(&direct, "direct-bench", "again").await;
    delete(&via, "embedded-bench", "unsigned").await;
    let _ = gw.kill();
    let _ = gw.wait();
}

/// `perf record` of process `pid` into `out`, until [`stop_profile`].
fn record_profile(pid: u32, out: &str) -> Child {
    // `-g` unwinds by frame pointers, which these builds lack; DWARF unwinding sees through.
    Command::new("perf")
        .args(["record", "-F", "999", "--call-graph=dwarf,32768", "-o", out])
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn stop_profile(perf: Option<Child>) {
    if let Some(mut p) = perf {
        let _ = Command::new("kill")
            .args(["-INT", &p.id().to_string()])
            .status();
        let _ = p.wait();
    }
}

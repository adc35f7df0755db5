//! The Velero-shaped conformance scenario: the S3 calls Velero's aws plugin makes, made
//! with aws-sdk-s3 against a kura gateway.
//!
//! Velero uploads backup tarballs with a multipart upload manager (5 MiB parts, 5 in
//! flight, the SDK's default CRC32 trailer checksums), reads them back whole and by
//! range, lists with and without a delimiter, hands out presigned GET URLs signed for its
//! `publicUrl` (a host name other than the one it uses itself), and deletes.
//!
//! Usage: `velero-scenario --endpoint URL --public-url URL --bucket NAME [--tarball FILE]
//! [--region R] [--path-style true|false] [--prefix P]`, the last three as Velero's
//! BackupStorageLocation gives them (`region`, `s3ForcePathStyle`, `objectStorage.prefix`;
//! the harness reads them from deploy/velero/backupstoragelocation.yaml), with the gateway
//! credentials in `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`. The
//! bucket must exist. The tarball (generated when not given) stays in the bucket at the
//! end, so that the harness can check what the upstream stored. Prints one line per step,
//! `ok SECONDS STEP` or `FAIL SECONDS STEP: reason`, and exits non-zero if any step failed;
//! the conformance harness turns those lines into its table. The SDK does not retry: on
//! loopback a retry would only hide a gateway bug.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, retry::RetryConfig};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures::{StreamExt, TryStreamExt};

/// Velero's part size (the AWS SDK upload manager's default).
const PART_SIZE: usize = 5 * 1024 * 1024;
/// Parts in flight at once (the upload manager's default concurrency).
const PARTS_IN_FLIGHT: usize = 5;
/// The generated backup tarball: four full parts and a short last one.
const TARBALL_SIZE: usize = 4 * PART_SIZE + 1_234_567;
const TARBALL_KEY: &str = "backups/nightly-1/nightly-1.tar.gz";

struct Args {
    endpoint: String,
    public_url: String,
    bucket: String,
    tarball: Option<String>,
    region: String,
    path_style: bool,
}

/// The BackupStorageLocation's `objectStorage.prefix`, with its slash: Velero writes every
/// key below it.
static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn prefix() -> &'static str {
    PREFIX.get().map_or("", String::as_str)
}

/// `key` below the BackupStorageLocation's prefix.
fn key(key: &str) -> String {
    format!("{}{key}", prefix())
}

fn parse_args() -> Result<Args> {
    let mut endpoint = None;
    let mut public_url = None;
    let mut bucket = None;
    let mut tarball = None;
    let mut region = "us-east-1".to_owned();
    let mut path_style = true;
    let mut prefix = String::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--endpoint" => endpoint = Some(value),
            "--public-url" => public_url = Some(value),
            "--bucket" => bucket = Some(value),
            "--tarball" => tarball = Some(value),
            "--region" => region = value,
            "--path-style" => path_style = value.parse().context("--path-style true|false")?,
            "--prefix" if value.is_empty() => {}
            "--prefix" => prefix = format!("{}/", value.trim_end_matches('/')),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Args {
        endpoint: endpoint.context("--endpoint is required")?,
        public_url: public_url.context("--public-url is required")?,
        bucket: bucket.context("--bucket is required")?,
        tarball,
        region,
        path_style,
    })
    .inspect(|_| PREFIX.set(prefix).expect("set once"))
}

fn client(endpoint: &str, args: &Args) -> Result<Client> {
    let ak = std::env::var("AWS_ACCESS_KEY_ID").context("AWS_ACCESS_KEY_ID")?;
    let sk = std::env::var("AWS_SECRET_ACCESS_KEY").context("AWS_SECRET_ACCESS_KEY")?;
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .force_path_style(args.path_style)
        .region(Region::new(args.region.clone()))
        .credentials_provider(Credentials::new(ak, sk, None, None, "conformance"))
        .retry_config(RetryConfig::disabled())
        .build();
    Ok(Client::from_conf(conf))
}

/// Deterministic, incompressible test bytes (xorshift64*), so a failure reproduces.
fn test_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, data))
}

async fn get_bytes(s3: &Client, bucket: &str, key: &str, range: Option<&str>) -> Result<Vec<u8>> {
    let out = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_range(range.map(str::to_owned))
        .send()
        .await
        .with_context(|| format!("GetObject {key} {range:?}"))?;
    Ok(out.body.collect().await?.into_bytes().to_vec())
}

/// Multipart upload as Velero's upload manager does it; returns the completion ETag.
async fn multipart_upload(s3: &Client, bucket: &str, data: &[u8]) -> Result<String> {
    let created = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(key(TARBALL_KEY))
        .send()
        .await
        .context("CreateMultipartUpload")?;
    let upload_id = created.upload_id().context("no upload ID")?;
    let mut parts: Vec<CompletedPart> =
        futures::stream::iter(data.chunks(PART_SIZE).enumerate().map(|(i, chunk)| {
            let number = i32::try_from(i + 1).expect("fewer than 10,000 parts");
            async move {
                let out = s3
                    .upload_part()
                    .bucket(bucket)
                    .key(key(TARBALL_KEY))
                    .upload_id(upload_id)
                    .part_number(number)
                    .body(ByteStream::from(chunk.to_vec()))
                    .send()
                    .await
                    .with_context(|| format!("UploadPart {number}"))?;
                anyhow::Ok(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(out.e_tag)
                        .set_checksum_crc32(out.checksum_crc32)
                        .build(),
                )
            }
        }))
        .buffer_unordered(PARTS_IN_FLIGHT)
        .try_collect()
        .await?;
    parts.sort_by_key(CompletedPart::part_number);
    let done = s3
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key(TARBALL_KEY))
        .upload_id(upload_id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .context("CompleteMultipartUpload")?;
    done.e_tag()
        .map(str::to_owned)
        .context("no ETag in CompleteMultipartUpload")
}

async fn step_multipart(s3: &Client, bucket: &str, data: &[u8]) -> Result<()> {
    let etag = multipart_upload(s3, bucket, data).await?;
    let head = s3
        .head_object()
        .bucket(bucket)
        .key(key(TARBALL_KEY))
        .send()
        .await?;
    ensure!(
        head.content_length() == Some(i64::try_from(data.len())?),
        "HEAD size {:?}, expected {}",
        head.content_length(),
        data.len()
    );
    ensure!(
        head.e_tag() == Some(etag.as_str()),
        "HEAD ETag {:?} != completion ETag {etag}",
        head.e_tag()
    );
    Ok(())
}

async fn step_get(s3: &Client, bucket: &str, data: &[u8]) -> Result<()> {
    let whole = get_bytes(s3, bucket, &key(TARBALL_KEY), None).await?;
    ensure!(
        sha256_hex(&whole) == sha256_hex(data),
        "whole GET differs from what was uploaded"
    );
    for (range, lo, hi) in [
        ("bytes=0-0", 0, 1),
        ("bytes=5242870-5242890", 5_242_870, 5_242_891),
        ("bytes=-1000", data.len() - 1000, data.len()),
        ("bytes=20971000-", 20_971_000, data.len()),
    ] {
        let got = get_bytes(s3, bucket, &key(TARBALL_KEY), Some(range)).await?;
        ensure!(got == data[lo..hi], "range {range} differs");
    }
    Ok(())
}

/// The layout Velero writes: backups/NAME/..., restores/NAME/..., metadata/revision.
const SMALL_KEYS: [&str; 5] = [
    "backups/nightly-1/nightly-1-logs.gz",
    "backups/nightly-2/nightly-2.tar.gz",
    "backups/nightly-2/velero-backup.json",
    "restores/r-1/restore-r-1-logs.gz",
    "metadata/revision",
];

async fn step_list(s3: &Client, bucket: &str) -> Result<()> {
    for (i, small) in SMALL_KEYS.iter().enumerate() {
        let body = test_bytes(100 + i * 1000, i as u64 + 7);
        s3.put_object()
            .bucket(bucket)
            .key(key(small))
            .body(body.into())
            .send()
            .await?;
    }
    let prefixes = |out: &aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output| {
        out.common_prefixes()
            .iter()
            .filter_map(|p| p.prefix().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let top = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix())
        .delimiter("/")
        .send()
        .await?;
    ensure!(
        prefixes(&top) == [key("backups/"), key("metadata/"), key("restores/")],
        "top level: {:?}",
        prefixes(&top)
    );
    let backups = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(key("backups/"))
        .delimiter("/")
        .send()
        .await?;
    ensure!(
        prefixes(&backups) == [key("backups/nightly-1/"), key("backups/nightly-2/")],
        "backups/: {:?}",
        prefixes(&backups)
    );
    let flat = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(key("backups/nightly-2/"))
        .send()
        .await?;
    let listed: Vec<(String, i64)> = flat
        .contents()
        .iter()
        .map(|o| {
            (
                o.key().unwrap_or_default().to_owned(),
                o.size().unwrap_or(-1),
            )
        })
        .collect();
    ensure!(
        listed
            == [
                (key("backups/nightly-2/nightly-2.tar.gz"), 1100),
                (key("backups/nightly-2/velero-backup.json"), 2100)
            ],
        "backups/nightly-2/ contents: {listed:?}"
    );
    Ok(())
}

/// `velero backup download` / `logs`: a URL presigned for the public URL, fetched by a
/// plain HTTP client that knows nothing of S3.
async fn step_presign(args: &Args, data: &[u8]) -> Result<()> {
    let public = client(&args.public_url, args)?;
    let presigned = public
        .get_object()
        .bucket(&args.bucket)
        .key(key(TARBALL_KEY))
        .presigned(PresigningConfig::expires_in(Duration::from_mins(10))?)
        .await?;
    let url = presigned.uri().to_owned();
    let connect = args
        .endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let fetch = |url: String| {
        let connect = connect.clone();
        tokio::task::spawn_blocking(move || http_get(&connect, &url))
    };
    let (status, body) = fetch(url.clone()).await??;
    ensure!(status == 200, "presigned GET answered {status}");
    ensure!(
        sha256_hex(&body) == sha256_hex(data),
        "presigned GET body differs"
    );
    let tampered = url.replacen("nightly-1.tar.gz", "nightly-1-logs.gz", 1);
    let (status, _) = fetch(tampered).await??;
    ensure!(
        status == 403,
        "a presigned URL pointed at another key answered {status}, not 403"
    );
    Ok(())
}

/// HTTP/1.1 GET of `url` over a connection to `connect`, sending the URL's own host in
/// `Host` (as a browser that resolved the public name to this address would).
fn http_get(connect: &str, url: &str) -> Result<(u16, Vec<u8>)> {
    let rest = url.split_once("://").context("URL without scheme")?.1;
    let (host, path) = rest.split_at(rest.find('/').context("URL without path")?);
    let mut sock = TcpStream::connect(connect)?;
    write!(
        sock,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no header end")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.get(9..12).context("short status line")?.parse()?;
    let body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        return Ok((status, dechunk(&body)?));
    }
    Ok((status, body))
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("chunk size line")?;
        let size = usize::from_str_radix(std::str::from_utf8(&body[..eol])?.trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        let start = eol + 2;
        out.extend_from_slice(body.get(start..start + size).context("short chunk")?);
        body = body.get(start + size + 2..).context("chunk without CRLF")?;
    }
}

async fn step_delete(s3: &Client, bucket: &str) -> Result<()> {
    for small in SMALL_KEYS {
        s3.delete_object()
            .bucket(bucket)
            .key(key(small))
            .send()
            .await?;
    }
    let left = s3.list_objects_v2().bucket(bucket).send().await?;
    let keys: Vec<&str> = left.contents().iter().filter_map(|o| o.key()).collect();
    ensure!(
        keys == [key(TARBALL_KEY)],
        "after deleting the small objects the bucket lists {keys:?}"
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let s3 = client(&args.endpoint, &args)?;
    let data = match &args.tarball {
        Some(path) => std::fs::read(path).with_context(|| format!("reading {path}"))?,
        None => test_bytes(TARBALL_SIZE, 0x7e1e_0001),
    };
    ensure!(
        data.len() > 4 * PART_SIZE,
        "the tarball must be over four parts long"
    );
    let mut failed = 0;
    let mut report = |step: &str, started: Instant, result: Result<()>| {
        let secs = started.elapsed().as_secs_f64();
        match result {
            Ok(()) => println!("ok {secs:.2} {step}"),
            Err(e) => {
                failed += 1;
                println!("FAIL {secs:.2} {step}: {e:#}");
            }
        }
    };
    let t = Instant::now();
    report(
        "multipart 5 MiB x5",
        t,
        step_multipart(&s3, &args.bucket, &data).await,
    );
    let t = Instant::now();
    report("get + ranges", t, step_get(&s3, &args.bucket, &data).await);
    let t = Instant::now();
    report("list v2 delimiter", t, step_list(&s3, &args.bucket).await);
    let t = Instant::now();
    report(
        "presigned GET (public URL)",
        t,
        step_presign(&args, &data).await,
    );
    let t = Instant::now();
    report("delete", t, step_delete(&s3, &args.bucket).await);
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

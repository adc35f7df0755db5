"""rustic (crates.io `rustic-rs`, the Rust peer of restic) with an S3 repository through the
gateway, over OpenDAL's S3 service: init, a backup of the restic scenario's mixed data, a
second backup after changes, `check --read-data`, restore compared byte for byte, `forget
--keep-last 1`, `prune`, then `check` again. On demand only (`conformance/run --only
rustic`), like Garage: `cargo install rustic-rs` takes many minutes here, too long for CI.

rustic reads its repository options from a profile file; the harness writes one into the
scenario's own config folder (`XDG_CONFIG_HOME`), so nothing of the user's is read."""

import json
import os
import shutil
from pathlib import Path

from ..context import assert_same_tree, check, random_file, text_file
from ..upstreams import ROOT
from .restic import make_data

CLIENT = "rustic"
TOOLS = ROOT / "target" / "conformance-tools" / "bin"


def binary():
    found = shutil.which("rustic")
    return Path(found) if found else TOOLS / "rustic"


def version(ctx):
    return ctx.run(binary(), "--version").strip()


def profile(ctx, bucket):
    """rustic's profile for the gateway: OpenDAL's S3 service, path style, the gateway's
    client credentials, and a cache inside the scratch directory."""
    return f"""[repository]
repository = "opendal:s3"
password = "conformance"
cache-dir = "{ctx.work / CLIENT / 'cache'}"

[repository.options]
bucket = "{bucket}"
root = "/"
endpoint = "{ctx.gateway_url}"
region = "us-east-1"
access_key_id = "{ctx.access_key}"
secret_access_key = "{ctx.secret_key}"
enable_virtual_host_style = "false"
"""


def run(ctx):
    bucket = ctx.upstream.bucket_name(CLIENT)
    work = ctx.work / CLIENT
    data = work / "data"
    config = work / "config"
    (config / "rustic").mkdir(parents=True)
    (config / "rustic" / "kura.toml").write_text(profile(ctx, bucket))
    os.chmod(config / "rustic" / "kura.toml", 0o600)
    env = ctx.client_env(XDG_CONFIG_HOME=str(config), RUSTIC_NO_PROGRESS="true")
    rustic = lambda *a: ctx.run(binary(), "-P", "kura", "--no-progress", *a, env=env, timeout=3600)  # noqa: E731
    make_data(data, ctx.restic_mib)

    with ctx.step(CLIENT, "create bucket (setup); init"):
        ctx.gateway_s3().create_bucket(Bucket=bucket)
        rustic("init")
    with ctx.step(CLIENT, f"backup (~{ctx.restic_mib} MiB mixed)"):
        rustic("backup", data)
    with ctx.step(CLIENT, "second backup (some files changed)"):
        text_file(data / "logs" / "app-0.log", (32 << 20) + 4096, seed=700)
        random_file(data / "small" / "new" / "added.bin", 250_000, seed=701)
        (data / "small" / "d0" / "f0.bin").unlink()
        rustic("backup", data)
        check(len(snapshots(rustic)) == 2, "expected 2 snapshots")
    with ctx.step(CLIENT, "check --read-data"):
        rustic("check", "--read-data")
    with ctx.step(CLIENT, "restore (byte-identical)"):
        target = work / "restore"
        rustic("restore", f"latest:{data}", target)
        files = assert_same_tree(data, target)
        check(files > 100, f"only {files} files compared")
    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        ctx.assert_only_ciphertext(bucket, min_objects=5)
    with ctx.step(CLIENT, "forget --keep-last 1; prune; check"):
        rustic("forget", "--keep-last", "1")
        check(len(snapshots(rustic)) == 1, "expected 1 snapshot after forget")
        rustic("prune", "--max-unused", "0")
        rustic("check")


def snapshots(rustic):
    """The snapshots' IDs; `snapshots --json` groups them by host and paths."""
    groups = json.loads(rustic("snapshots", "--json"))
    return [s["id"] for group in groups for s in (group[1] if isinstance(group, list) else group["snapshots"])]

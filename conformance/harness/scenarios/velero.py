"""Velero-shaped: what Velero's aws plugin does, made by `conformance/velero` (aws-sdk-s3
from Rust): 5 MiB parts 5 in flight, ranges, delimiter listings, a presigned GET signed
for the public URL and fetched by a plain HTTP client, deletes. Region, path style and key
prefix are those of deploy/velero/backupstoragelocation.yaml, the BackupStorageLocation
that deploy/README.md tells operators to apply, so the recipe and this test cannot drift
apart; only the addresses are the test's."""

import re

import yaml

from ..context import random_file
from ..upstreams import ROOT
from .goscenario import run_steps

CLIENT = "velero"
BINARY = ROOT / "target" / "release" / "velero-scenario"
BSL = ROOT / "deploy" / "velero" / "backupstoragelocation.yaml"


def bsl_settings():
    """The flags of velero-scenario that the BackupStorageLocation decides."""
    spec = yaml.safe_load(BSL.read_text())["spec"]
    config = spec["config"]
    return ["--region", config["region"],
            "--path-style", str(config.get("s3ForcePathStyle", "false")).lower(),
            "--prefix", spec["objectStorage"].get("prefix", "")]


def version(ctx):
    lock = (ROOT / "Cargo.lock").read_text()
    sdk = re.search(r'name = "aws-sdk-s3"\nversion = "([^"]+)"', lock).group(1)
    return f"aws-sdk-s3 {sdk} (Rust)"


def run(ctx):
    bucket = ctx.upstream.bucket_name(CLIENT)
    with ctx.step(CLIENT, "create bucket (setup)"):
        ctx.gateway_s3().create_bucket(Bucket=bucket)
    # Four full 5 MiB parts and a short fifth, as a tarball's tail would be.
    tarball = random_file(ctx.work / "velero" / "nightly-1.tar.gz", 4 * 5 * 1024 * 1024 + 1_234_567, seed=11)
    run_steps(ctx, CLIENT, [BINARY, "--endpoint", ctx.gateway_url, "--public-url", ctx.public_url,
                            "--bucket", bucket, "--tarball", tarball, *bsl_settings()])
    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        prefix = yaml.safe_load(BSL.read_text())["spec"]["objectStorage"].get("prefix", "")
        key = f"{prefix}/backups/nightly-1/nightly-1.tar.gz".lstrip("/")
        ctx.assert_only_ciphertext(bucket, samples={key: tarball})

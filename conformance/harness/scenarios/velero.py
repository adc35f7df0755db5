"""Velero-shaped: what Velero's aws plugin does, made by `conformance/velero` (aws-sdk-s3
from Rust): 5 MiB parts 5 in flight, ranges, delimiter listings, a presigned GET signed
for the public URL and fetched by a plain HTTP client, deletes."""

import re
import subprocess

from ..context import random_file
from ..upstreams import ROOT

CLIENT = "velero"
BINARY = ROOT / "target" / "release" / "velero-scenario"


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
    proc = subprocess.run(
        [BINARY, "--endpoint", ctx.gateway_url, "--public-url", ctx.public_url, "--bucket", bucket,
         "--tarball", tarball],
        env=ctx.client_env(), capture_output=True, text=True, timeout=600,
    )
    steps = 0
    for line in proc.stdout.splitlines():
        mark, _, rest = line.partition(" ")
        if mark not in ("ok", "FAIL"):
            continue
        secs, _, rest = rest.partition(" ")
        op, _, detail = rest.partition(": ") if mark == "FAIL" else (rest, "", "")
        ctx.record(CLIENT, op, mark == "ok", detail, float(secs))
        steps += 1
    if steps == 0:
        ctx.record(CLIENT, "run", False, f"exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        ctx.assert_only_ciphertext(bucket, samples={"backups/nightly-1/nightly-1.tar.gz": tarball})

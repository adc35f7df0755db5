"""aws-sdk-go-v2 doing what Velero's AWS plugin does (conformance/go/velero-awsv2): the
manager's uploader with 5 MiB parts, 5 in flight and CRC32; GETs and ranges; ListObjectsV2
with a delimiter; a GET presigned for the public URL; DeleteObject. Region, path style and
prefix come from deploy/velero/backupstoragelocation.yaml, as for the Rust-made `velero`
scenario. Debian's Go packages are older than upstream's newest, so the version cell names
the Debian package."""

import yaml

from ..context import random_file
from .goscenario import GO_BIN, debian_version, go_version, run_steps
from .velero import BSL

CLIENT = "aws-sdk-go-v2"
PACKAGE = "golang-github-aws-aws-sdk-go-v2-dev"


def version(ctx):
    return f"Debian {PACKAGE} {debian_version(PACKAGE)} (service/s3 1.29.1), {go_version()}"


def run(ctx):
    bucket = ctx.upstream.bucket_name("awsgo")
    spec = yaml.safe_load(BSL.read_text())["spec"]
    prefix = spec["objectStorage"].get("prefix", "")
    with ctx.step(CLIENT, "create bucket (setup)"):
        ctx.gateway_s3().create_bucket(Bucket=bucket)
    # Four full 5 MiB parts and a short fifth, as a tarball's tail would be.
    tarball = random_file(ctx.work / CLIENT / "nightly-1.tar.gz", 4 * 5 * 1024 * 1024 + 765_432, seed=21)
    run_steps(ctx, CLIENT, [
        GO_BIN / "velero-awsv2", "-endpoint", ctx.gateway_url, "-public-url", ctx.public_url,
        "-bucket", bucket, "-tarball", tarball, "-region", spec["config"]["region"],
        f"-path-style={str(spec['config'].get('s3ForcePathStyle', 'false')).lower()}", "-prefix", prefix,
    ])
    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        key = f"{prefix}/backups/nightly-1/nightly-1.tar.gz".lstrip("/")
        ctx.assert_only_ciphertext(bucket, samples={key: tarball})

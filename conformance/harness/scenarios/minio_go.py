"""minio-go v7 doing what Kopia's S3 storage does (conformance/go/kopia-minio): on the
run's upstream, PutObject with Content-MD5, StatObject, ListObjects by prefix, ranged
GetObject, RemoveObject; then, on an upstream that keeps versions and Object Lock (moto's
S3 server with its own gateway, as in `versioned`), PutObject with a GOVERNANCE retention,
PutObjectRetention extending it, listings with versions, an old version read back, and the
removal of a locked version refused by the upstream. Kopia extends locks with
PutObjectRetention, which acts with the gateway's upstream identity, so that gateway's
credential is given the `object-retention` power (gateway/README.md, "Client powers")."""

from ..context import KURA_MAGIC, check
from ..gateway import MotoGateway
from .goscenario import GO_BIN, debian_version, go_version, run_steps

CLIENT = "minio-go"
PACKAGE = "golang-github-minio-minio-go-v7-dev"


def version(ctx):
    import moto  # noqa: PLC0415 -- installed by conformance/run with the other PyPI tools

    return f"Debian {PACKAGE} {debian_version(PACKAGE)}, {go_version()}; locked steps on moto_server {moto.__version__}"


def run(ctx):
    bucket = ctx.upstream.bucket_name("miniogo")
    locked_bucket = "conf-miniogo-locked"
    work = ctx.work / CLIENT
    work.mkdir()
    own = MotoGateway(work)
    upstream = own.upstream
    try:
        with ctx.step(CLIENT, "setup: buckets; moto with Object Lock and its gateway"):
            ctx.gateway_s3().create_bucket(Bucket=bucket)
            own.start(powers=["object-retention"], secret_key=ctx.secret_key)
            # As an operator does it: Object Lock (which turns versioning on) at the provider.
            upstream.s3().create_bucket(Bucket=locked_bucket, ObjectLockEnabledForBucket=True)
        locked = ["-locked-endpoint", f"127.0.0.1:{own.port}", "-locked-bucket", locked_bucket] if own.proc else []
        run_steps(ctx, CLIENT, [GO_BIN / "kopia-minio", "-endpoint", ctx.gateway_url.removeprefix("http://"),
                                "-bucket", bucket, *locked])
        with ctx.step(CLIENT, "upstream holds only ciphertext (every version)"):
            ctx.assert_only_ciphertext(bucket, min_objects=4)
            up = upstream.s3()
            versions = up.list_object_versions(Bucket=locked_bucket).get("Versions", [])
            check(len(versions) == 2, f"{len(versions)} versions stored upstream, expected 2")
            for v in versions:
                head = up.get_object(Bucket=locked_bucket, Key=v["Key"], VersionId=v["VersionId"],
                                     Range="bytes=0-3")["Body"].read()
                check(head == KURA_MAGIC, f"version {v['VersionId']} is not a kura body: {head!r}")
    finally:
        own.stop()

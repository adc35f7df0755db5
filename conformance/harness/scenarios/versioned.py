"""A versioned bucket through the gateway: Kopia reads old versions for point-in-time
restores, and operators switch versioning on in the provider's console. neither s3s-fs nor
Garage keeps versions, so this scenario starts its own upstream, moto's S3 server, and its
own gateway in front of it; boto3 is the client. moto cannot complete multipart uploads
through aws-sdk-s3 (see `upstreams.Moto`), so every version here is a single PUT or a copy."""

import hashlib
import os

import boto3
import botocore
from botocore.config import Config

from ..context import KURA_MAGIC, check
from ..gateway import MotoGateway

CLIENT = "versioned"


def version(ctx):
    import moto  # noqa: PLC0415 -- installed by conformance/run with the other PyPI tools

    return f"boto3 {boto3.__version__}; upstream moto_server {moto.__version__}"


def sha(b):
    return hashlib.sha256(b).hexdigest()


def error_code(call):
    """The S3 error code `call` fails with, or None when it succeeds."""
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    return None


def run(ctx):
    work = ctx.work / CLIENT
    work.mkdir(exist_ok=True)
    own = MotoGateway(work)
    try:
        with ctx.step(CLIENT, "setup: moto, gateway, versioned bucket"):
            own.start()
        if own.proc is None:
            return
        steps(ctx, own.upstream, own.port, own.access_key, own.secret_key)
        with ctx.step(CLIENT, "gateway still running"):
            check(own.proc.poll() is None, f"gateway exited {own.proc.returncode}")
    finally:
        own.stop()


def steps(ctx, upstream, port, ak, sk):
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=ak,
        aws_secret_access_key=sk,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
    )
    up = upstream.s3()
    bucket = upstream.bucket_name(CLIENT)
    bodies = {}  # version ID -> plaintext
    etags = {}  # version ID -> ETag from the PUT or copy

    with ctx.step(CLIENT, "create_bucket; versioning on upstream"):
        s3.create_bucket(Bucket=bucket)
        # As an operator does it: on the provider's side, not through the gateway.
        up.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})

    with ctx.step(CLIENT, "two versions of a key, then delete"):
        for size in (100_000, 70_001):
            body = os.urandom(size)
            r = s3.put_object(Bucket=bucket, Key="doc", Body=body)
            check(r.get("VersionId"), f"PUT answered without a version ID: {r}")
            bodies[r["VersionId"]], etags[r["VersionId"]] = body, r["ETag"]
        d = s3.delete_object(Bucket=bucket, Key="doc")
        check(d.get("DeleteMarker") is True, f"delete answered {d}")
        code = error_code(lambda: s3.get_object(Bucket=bucket, Key="doc"))
        check(code == "NoSuchKey", f"GET after delete: {code}")
    old, new = list(bodies)

    with ctx.step(CLIENT, "list_object_versions: sizes, ETags, marker"):
        r = s3.list_object_versions(Bucket=bucket, Prefix="doc")
        listed = {v["VersionId"]: v for v in r.get("Versions", [])}
        check(set(listed) == set(bodies), f"listed versions {sorted(listed)}, put {sorted(bodies)}")
        for vid, v in listed.items():
            check(v["Size"] == len(bodies[vid]), f"{vid}: listed size {v['Size']}, plaintext {len(bodies[vid])}")
            check(v["ETag"] == etags[vid], f"{vid}: listed ETag {v['ETag']}, PUT said {etags[vid]}")
            check(v["IsLatest"] is False, f"{vid} is latest despite the delete marker")
        markers = r.get("DeleteMarkers", [])
        check(len(markers) == 1 and markers[0]["IsLatest"], f"delete markers {markers}")

    with ctx.step(CLIENT, "get_object / head_object by VersionId"):
        for vid, body in bodies.items():
            g = s3.get_object(Bucket=bucket, Key="doc", VersionId=vid)
            check(sha(g["Body"].read()) == sha(body), f"{vid}: GET returned other bytes")
            check(g.get("VersionId") == vid, f"GET answered version {g.get('VersionId')}")
            check(g["ETag"] == etags[vid], f"{vid}: GET ETag {g['ETag']}")
            h = s3.head_object(Bucket=bucket, Key="doc", VersionId=vid)
            check(h["ContentLength"] == len(body), f"{vid}: HEAD size {h['ContentLength']}")
            check(h["ETag"] == etags[vid], f"{vid}: HEAD ETag {h['ETag']}")

    with ctx.step(CLIENT, "ranged GET of a version with If-Match"):
        body = bodies[old]
        for rng, want in (("bytes=65530-65545", body[65530:65546]), ("bytes=-7", body[-7:]),
                          ("bytes=99990-", body[99990:])):
            g = s3.get_object(Bucket=bucket, Key="doc", VersionId=old, Range=rng, IfMatch=etags[old])
            check(g["Body"].read() == want, f"{rng}: other bytes")
        code = error_code(lambda: s3.get_object(Bucket=bucket, Key="doc", VersionId=old, Range="bytes=0-9",
                                                IfMatch=etags[new]))
        check(code == "PreconditionFailed", f"If-Match with another version's ETag: {code}")

    with ctx.step(CLIENT, "copy_object of an old version (restore)"):
        c = s3.copy_object(Bucket=bucket, Key="doc", CopySource={"Bucket": bucket, "Key": "doc", "VersionId": old})
        g = s3.get_object(Bucket=bucket, Key="doc")
        check(sha(g["Body"].read()) == sha(bodies[old]), "the restored key holds other bytes")
        check(g["ETag"] == c["CopyObjectResult"]["ETag"], f"GET ETag {g['ETag']}, copy said {c['CopyObjectResult']['ETag']}")
        check(g.get("VersionId") == c.get("VersionId"), f"GET version {g.get('VersionId')}, copy made {c.get('VersionId')}")

    big = os.urandom((20 << 20) + 7)
    with ctx.step(CLIENT, "copy_object of an old 20 MiB version (server-side parts)"):
        first = s3.put_object(Bucket=bucket, Key="big", Body=big)["VersionId"]
        s3.put_object(Bucket=bucket, Key="big", Body=b"small")
        c = s3.copy_object(Bucket=bucket, Key="big", CopySource={"Bucket": bucket, "Key": "big", "VersionId": first})
        # The gateway sends 8 MiB and has the upstream copy the rest (UploadPartCopy).
        check(c["CopyObjectResult"]["ETag"].endswith('-2"'), f"copy ETag {c['CopyObjectResult']['ETag']}")
        g = s3.get_object(Bucket=bucket, Key="big")
        check(sha(g["Body"].read()) == sha(big), "the restored key holds other bytes")
        sizes = [v["Size"] for v in s3.list_object_versions(Bucket=bucket, Prefix="big")["Versions"]]
        check(sorted(sizes) == sorted([len(big), 5, len(big)]), f"listed sizes {sizes}")

    with ctx.step(CLIENT, "list_object_versions: pages, prefix, delimiter"):
        for i in range(3):
            for j in range(2):
                s3.put_object(Bucket=bucket, Key=f"dir/{i}", Body=os.urandom(10 + i + j))
        whole = s3.list_object_versions(Bucket=bucket)
        want = [(v["Key"], v["VersionId"], v["Size"]) for v in whole["Versions"]]
        check(len(want) == 12, f"{len(want)} versions listed, 12 written")
        paged, kw = [], {}
        while True:
            r = s3.list_object_versions(Bucket=bucket, MaxKeys=2, **kw)
            paged += [(v["Key"], v["VersionId"], v["Size"]) for v in r.get("Versions", [])]
            if not r.get("IsTruncated"):
                break
            kw = {"KeyMarker": r["NextKeyMarker"], "VersionIdMarker": r["NextVersionIdMarker"]}
        check(paged == want, "pages of 2 differ from the whole listing")
        r = s3.list_object_versions(Bucket=bucket, Delimiter="/")
        check([p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["dir/"], f"prefixes {r.get('CommonPrefixes')}")
        check({v["Key"] for v in r.get("Versions", [])} == {"big", "doc"}, "delimiter listing shows keys under dir/")
        sizes = sorted(v["Size"] for v in s3.list_object_versions(Bucket=bucket, Prefix="dir/")["Versions"])
        check(sizes == [10, 11, 11, 12, 12, 13], f"sizes under dir/: {sizes}")

    with ctx.step(CLIENT, "delete_object of one version"):
        s3.delete_object(Bucket=bucket, Key="doc", VersionId=new)
        code = error_code(lambda: s3.get_object(Bucket=bucket, Key="doc", VersionId=new))
        check(code == "NoSuchVersion", f"GET of the deleted version: {code}")
        left = {v["VersionId"] for v in s3.list_object_versions(Bucket=bucket, Prefix="doc").get("Versions", [])}
        check(new not in left and old in left, f"versions left: {sorted(left)}")

    with ctx.step(CLIENT, "upstream holds only ciphertext (every version)"):
        stored = up.list_object_versions(Bucket=bucket).get("Versions", [])
        # Twelve written (doc: two and a restored copy; big: two and a copy; six under
        # dir/), one deleted.
        check(len(stored) == 11, f"{len(stored)} versions upstream, 11 expected")
        for v in stored:
            obj = up.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])["Body"].read()
            check(obj[:4] == KURA_MAGIC, f"{v['Key']} {v['VersionId']}: starts {obj[:4]!r}")
            for body in [*bodies.values(), big]:
                check(body[50_000:50_032] not in obj, f"{v['Key']} {v['VersionId']}: plaintext found")

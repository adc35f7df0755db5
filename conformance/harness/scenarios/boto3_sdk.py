"""boto3 with its default checksum settings (CRC32 in aws-chunked trailers on every PUT
and part), run in the harness's own interpreter."""

import hashlib
import http.client
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore
from boto3.s3.transfer import TransferConfig

from ..context import assert_same_file, check, random_file

CLIENT = "boto3"
LISTED_KEYS = 2500


def version(ctx):
    return f"boto3 {boto3.__version__}, botocore {botocore.__version__}"


def client(ctx, **config):
    return ctx.gateway_s3(max_pool_connections=16, **config)


def plain_http(url, method="GET", body=None):
    """A plain HTTP client that adds no headers of its own (urllib would add a
    Content-Type to a PUT)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=30)
    try:
        conn.request(method, f"{parts.path}?{parts.query}", body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def run(ctx):
    s3 = client(ctx)
    bucket = ctx.upstream.bucket_name(CLIENT)
    work = ctx.work / CLIENT
    samples = {}
    with ctx.step(CLIENT, "create_bucket"):
        s3.create_bucket(Bucket=bucket)

    with ctx.step(CLIENT, "put_object / get_object"):
        body = random_file(work / "small.bin", 300_000, seed=300).read_bytes()
        s3.put_object(Bucket=bucket, Key="small.bin", Body=body, Metadata={"owner": "team-a"})
        got = s3.get_object(Bucket=bucket, Key="small.bin")
        check(got["Body"].read() == body, "get_object returned different bytes")
        check(got["Metadata"] == {"owner": "team-a"}, f"metadata {got['Metadata']}")
        check(got["ContentLength"] == len(body), f"ContentLength {got['ContentLength']}")
        samples["small.bin"] = work / "small.bin"

    with ctx.step(CLIENT, "upload_file / download_file (multipart, 8 threads)"):
        src = random_file(work / "big.bin", 45 << 20, seed=301)
        cfg = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=8)
        s3.upload_file(str(src), bucket, "big.bin", Config=cfg)
        back = work / "big.back"
        s3.download_file(bucket, "big.bin", str(back), Config=cfg)
        assert_same_file(src, back)
        check(s3.head_object(Bucket=bucket, Key="big.bin")["ContentLength"] == 45 << 20, "HEAD size")
        samples["big.bin"] = src

    # boto3 presigns with SigV2 for a custom endpoint unless told `s3v4`; the gateway takes
    # SigV4 only, as Backblaze B2 does (see conformance/README.md).
    v4 = client(ctx, signature_version="s3v4")
    with ctx.step(CLIENT, "presigned GET, SigV4 (plain HTTP client)"):
        url = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "small.bin"}, ExpiresIn=300)
        status, got = plain_http(url)
        check(status == 200 and got == body, f"presigned GET answered {status} with other bytes")

    with ctx.step(CLIENT, "presigned PUT, SigV4 (plain HTTP client)"):
        data = random_file(work / "presigned.bin", 123_457, seed=302).read_bytes()
        url = v4.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "presigned.bin"}, ExpiresIn=300)
        status, _ = plain_http(url, "PUT", data)
        check(status == 200, f"presigned PUT answered {status}")
        check(s3.get_object(Bucket=bucket, Key="presigned.bin")["Body"].read() == data, "object differs")
        samples["presigned.bin"] = work / "presigned.bin"

    with ctx.step(CLIENT, "presigned GET, boto3 default SigV2: refused clearly"):
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "small.bin"}, ExpiresIn=300)
        check("AWSAccessKeyId=" in url, f"boto3 no longer presigns with SigV2 by default: {url}")
        status, got = plain_http(url)
        check(status == 403 and b"SigV4" in got, f"answered {status}: {got[:200]!r}")

    keys = [f"many/{i:05d}" for i in range(LISTED_KEYS)]
    with ctx.step(CLIENT, f"list_objects_v2 pagination ({LISTED_KEYS} keys, MaxKeys 1000)"):
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))
        pages, seen, token = [], [], None
        while True:
            kw = {"ContinuationToken": token} if token else {}
            page = s3.list_objects_v2(Bucket=bucket, Prefix="many/", MaxKeys=1000, **kw)
            pages.append(page["KeyCount"])
            for obj in page.get("Contents", []):
                check(obj["Size"] == len(obj["Key"]), f"{obj['Key']}: listed size {obj['Size']}")
                seen.append(obj["Key"])
            if not page["IsTruncated"]:
                break
            token = page["NextContinuationToken"]
        check(pages == [1000, 1000, 500], f"page sizes {pages}")
        check(seen == keys, "listed keys are not the 2,500 keys in order")

    # botocore asks every listing for encoding-type=url and decodes the names it gets back.
    odd = sorted(["odd/a+b c", "odd/100%.txt", "odd/\u00e9 \u00fc", "odd/x=y&z;q", "odd/dir x/y"])
    with ctx.step(CLIENT, "odd key names (+ % space & non-ASCII) list back as written"):
        for k in odd:
            s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
        flat = s3.list_objects_v2(Bucket=bucket, Prefix="odd/")
        got = [(o["Key"], o["Size"]) for o in flat.get("Contents", [])]
        check(got == [(k, len(k.encode())) for k in odd], f"listed {got}")
        grouped = s3.list_objects_v2(Bucket=bucket, Prefix="odd/", Delimiter="/")
        prefixes = [p["Prefix"] for p in grouped.get("CommonPrefixes", [])]
        check(prefixes == ["odd/dir x/"], f"common prefixes {prefixes}")
        v1 = s3.list_objects(Bucket=bucket, Prefix="odd/a+b")
        check([o["Key"] for o in v1.get("Contents", [])] == ["odd/a+b c"], f"V1 listed {v1.get('Contents')}")
        for k in odd:
            check(s3.get_object(Bucket=bucket, Key=k)["Body"].read() == k.encode(), f"{k} reads back")

    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        ctx.assert_only_ciphertext(bucket, samples=samples, min_objects=LISTED_KEYS + 3)

    with ctx.step(CLIENT, "delete_objects"):
        for i in range(0, len(keys), 1000):
            out = s3.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
            )
            check(not out.get("Errors"), f"delete errors: {out.get('Errors', [])[:3]}")
        left = s3.list_objects_v2(Bucket=bucket, Prefix="many/")
        check(left["KeyCount"] == 0, f"{left['KeyCount']} keys left")
        check(hashlib.sha256(s3.get_object(Bucket=bucket, Key="small.bin")["Body"].read()).digest()
              == hashlib.sha256(body).digest(), "an object outside the deleted set changed")

"""aws-cli (the PyPI awscli, in the harness's virtualenv) with its default settings:
CRC32 trailer uploads, 8 MiB multipart above 8 MiB, parallel ranged downloads."""

import json
import os
import sys
import time
from pathlib import Path

from ..context import assert_same_file, assert_same_tree, check, random_file, text_file

CLIENT = "aws-cli"
AWS = Path(sys.executable).parent / "aws"
SIZES = {"1 B": 1, "7 MiB": 7 << 20, "100 MiB (multipart)": 100 << 20}


def version(ctx):
    return ctx.run(AWS, "--version").strip() or "?"


def run(ctx):
    bucket = ctx.upstream.bucket_name(CLIENT)
    work = ctx.work / CLIENT
    aws = lambda *a: ctx.run(AWS, "--endpoint-url", ctx.gateway_url, *a)  # noqa: E731
    with ctx.step(CLIENT, "s3 mb"):
        aws("s3", "mb", f"s3://{bucket}")

    files = {}
    for i, (label, size) in enumerate(SIZES.items()):
        src = random_file(work / "up" / f"file-{i}.bin", size, seed=100 + i)
        files[f"cp/file-{i}.bin"] = src
        with ctx.step(CLIENT, f"s3 cp up + down, {label}"):
            aws("s3", "cp", "--no-progress", src, f"s3://{bucket}/cp/file-{i}.bin")
            back = work / "down" / f"file-{i}.bin"
            aws("s3", "cp", "--no-progress", f"s3://{bucket}/cp/file-{i}.bin", back)
            assert_same_file(src, back)

    tree = work / "tree"
    for i in range(20):
        random_file(tree / f"dir-{i % 3}" / f"r-{i}.bin", 1000 * i, seed=200 + i)
    text_file(tree / "notes.txt", 3 << 20, seed=3)
    # Files a user syncs were written before the sync, not within its second: aws-cli
    # uploads a file whose mtime is newer than the object's LastModified, which S3 (and
    # moto) list to the second, so a file written in the second of its upload would be sent
    # again by the second sync on AWS too.
    an_hour_ago = time.time() - 3600
    for path in tree.rglob("*"):
        os.utime(path, (an_hour_ago, an_hour_ago))
    with ctx.step(CLIENT, "s3 sync, then again (nothing to do)"):
        first = aws("s3", "sync", "--no-progress", tree, f"s3://{bucket}/tree/")
        check(first.count("upload:") == 21, f"first sync uploaded {first.count('upload:')} files, expected 21")
        second = aws("s3", "sync", "--no-progress", tree, f"s3://{bucket}/tree/")
        check(second.strip() == "", f"second sync was not a no-op: {second.strip()[:200]}")
        restored = work / "tree-back"
        aws("s3", "sync", "--no-progress", f"s3://{bucket}/tree/", restored)
        assert_same_tree(tree, restored)

    with ctx.step(CLIENT, "s3 ls (sizes)"):
        listed = aws("s3", "ls", f"s3://{bucket}/cp/")
        sizes = {line.split()[-1]: int(line.split()[-2]) for line in listed.splitlines() if line.strip()}
        expected = {Path(k).name: p.stat().st_size for k, p in files.items()}
        check(sizes == expected, f"s3 ls sizes {sizes} != {expected}")
        recursive = aws("s3", "ls", "--recursive", f"s3://{bucket}/")
        check(len(recursive.splitlines()) == 24, f"recursive ls shows {len(recursive.splitlines())} keys, expected 24")

    big_key, big = "cp/file-2.bin", files["cp/file-2.bin"]
    with ctx.step(CLIENT, "s3api head-object"):
        head = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", big_key))
        check(head["ContentLength"] == big.stat().st_size, f"ContentLength {head['ContentLength']}")
        check(head.get("ETag"), "no ETag")

    with ctx.step(CLIENT, "s3api get-object --range"):
        size = big.stat().st_size
        data = big.read_bytes()
        for rng, want in [
            ("bytes=0-0", data[0:1]),
            ("bytes=65530-65545", data[65530:65546]),
            ("bytes=8388600-8388700", data[8388600:8388701]),
            ("bytes=-777", data[-777:]),
            (f"bytes={size - 100000}-", data[size - 100000 :]),
            (f"bytes={size - 10}-{size + 1000}", data[size - 10 :]),
        ]:
            out = work / "range.bin"
            aws("s3api", "get-object", "--bucket", bucket, "--key", big_key, "--range", rng, out)
            check(out.read_bytes() == want, f"range {rng} returned different bytes")

    with ctx.step(CLIENT, "folder marker (s3api put-object --key dir/)"):
        # What S3 consoles and rclone's directory markers create: an empty object whose key
        # ends in `/`, listed beside the keys below it.
        aws("s3api", "put-object", "--bucket", bucket, "--key", "marker/")
        aws("s3", "cp", "--no-progress", files["cp/file-0.bin"], f"s3://{bucket}/marker/inside.bin")
        head = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", "marker/"))
        check(head["ContentLength"] == 0, f"marker ContentLength {head['ContentLength']}")
        listed = json.loads(
            aws("s3api", "list-objects-v2", "--bucket", bucket, "--prefix", "marker/", "--delimiter", "/")
        )
        found = [(o["Key"], o["Size"]) for o in listed.get("Contents", [])]
        check(found == [("marker/", 0), ("marker/inside.bin", 1)], f"listed under marker/: {found}")
        top = aws("s3", "ls", f"s3://{bucket}/")
        check("PRE marker/" in top, f"s3 ls shows no marker/ prefix: {top.strip()[:200]}")

    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        ctx.assert_only_ciphertext(bucket, samples=files, min_objects=24)

    with ctx.step(CLIENT, "s3 rm --recursive"):
        aws("s3", "rm", "--recursive", f"s3://{bucket}/")
        left = aws("s3", "ls", "--recursive", f"s3://{bucket}/")
        check(left.strip() == "", f"objects left: {left[:200]}")

"""restic (Debian package) with an S3 repository through the gateway: init, two backups of
mixed data, check --read-data, restore compared byte for byte, forget --prune."""

import json
import random
import shutil

from ..context import assert_same_tree, check, random_file, text_file

CLIENT = "restic"


def version(ctx):
    return ctx.run("restic", "version").split(" compiled")[0].strip()


def make_data(root, mib, seed=600):
    """About `mib` MiB: 60 % random in 64 MiB files (one duplicated, for dedup), 20 %
    compressible text, 20 % small files from empty to 100 KiB."""
    rng = random.Random(seed)
    big = max(1, mib * 6 // 10 // 64)
    for i in range(big):
        random_file(root / "images" / f"disk-{i}.img", 64 << 20, seed=seed + i)
    shutil.copyfile(root / "images" / "disk-0.img", root / "images" / "disk-0-copy.img")
    for i in range(max(1, mib * 2 // 10 // 32)):
        text_file(root / "logs" / f"app-{i}.log", 32 << 20, seed=seed + 100 + i)
    small_bytes, n = 0, 0
    while small_bytes < (mib << 20) // 5:
        size = rng.choice([0, 1, rng.randint(2, 4096), rng.randint(4096, 100 << 10)])
        random_file(root / "small" / f"d{n % 37}" / f"f{n}.bin", size, seed=seed + 1000 + n)
        small_bytes += size
        n += 1
    return n


def run(ctx):
    bucket = ctx.upstream.bucket_name(CLIENT)
    work = ctx.work / CLIENT
    data = work / "data"
    env = ctx.client_env(
        RESTIC_REPOSITORY=f"s3:{ctx.gateway_url}/{bucket}",
        RESTIC_PASSWORD="conformance",
        RESTIC_CACHE_DIR=str(work / "cache"),
    )
    restic = lambda *a: ctx.run("restic", *a, env=env, timeout=3600)  # noqa: E731
    make_data(data, ctx.restic_mib)

    with ctx.step(CLIENT, "init"):
        restic("init")
    with ctx.step(CLIENT, f"backup (~{ctx.restic_mib} MiB mixed)"):
        restic("backup", "--quiet", data)
    with ctx.step(CLIENT, "second backup (some files changed)"):
        text_file(data / "logs" / "app-0.log", (32 << 20) + 4096, seed=700)
        random_file(data / "small" / "new" / "added.bin", 250_000, seed=701)
        (data / "small" / "d0" / "f0.bin").unlink()
        restic("backup", "--quiet", data)
        snaps = json.loads(restic("snapshots", "--json"))
        check(len(snaps) == 2, f"{len(snaps)} snapshots, expected 2")
    with ctx.step(CLIENT, "check --read-data"):
        restic("check", "--read-data")
    with ctx.step(CLIENT, "restore (byte-identical)"):
        target = work / "restore"
        restic("restore", "latest", "--target", target)
        files = assert_same_tree(data, target / data.relative_to("/"))
        check(files > 100, f"only {files} files compared")
    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        ctx.assert_only_ciphertext(bucket, min_objects=5)
    with ctx.step(CLIENT, "forget --keep-last 1 --prune"):
        restic("forget", "--keep-last", "1", "--prune")
        snaps = json.loads(restic("snapshots", "--json"))
        check(len(snaps) == 1, f"{len(snaps)} snapshots after forget, expected 1")
        restic("check")

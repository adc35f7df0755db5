"""s3cmd (Debian package) with a path-style config: 15 MiB multipart, MD5 checks on GET."""

from ..context import assert_same_file, check, random_file

CLIENT = "s3cmd"


def version(ctx):
    return ctx.run("s3cmd", "--version").strip()


def run(ctx):
    bucket = ctx.upstream.bucket_name(CLIENT)
    work = ctx.work / CLIENT
    work.mkdir(parents=True, exist_ok=True)
    host = ctx.gateway_url.removeprefix("http://")
    cfg = work / "s3cfg"
    cfg.write_text(
        "[default]\n"
        f"access_key = {ctx.access_key}\nsecret_key = {ctx.secret_key}\n"
        f"host_base = {host}\nhost_bucket = {host}\n"
        "use_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n"
    )
    s3cmd = lambda *a: ctx.run("s3cmd", "-c", cfg, "--no-progress", *a)  # noqa: E731
    big = random_file(work / "big.bin", 40 << 20, seed=400)
    small = random_file(work / "small.bin", 4321, seed=401)

    with ctx.step(CLIENT, "mb"):
        s3cmd("mb", f"s3://{bucket}")
    with ctx.step(CLIENT, "put (multipart, 15 MiB parts)"):
        s3cmd("put", big, f"s3://{bucket}/dir/big.bin")
        etag = ctx.gateway_s3().head_object(Bucket=bucket, Key="dir/big.bin")["ETag"]
        check(etag.endswith('-3"'), f"expected the ETag of a 3-part upload, got {etag}")
    with ctx.step(CLIENT, "put (single)"):
        s3cmd("put", small, f"s3://{bucket}/dir/small.bin")
    with ctx.step(CLIENT, "get"):
        for name, src in [("big.bin", big), ("small.bin", small)]:
            back = work / f"{name}.back"
            s3cmd("get", "--force", f"s3://{bucket}/dir/{name}", back)
            assert_same_file(src, back)
    with ctx.step(CLIENT, "ls (sizes)"):
        out = s3cmd("ls", f"s3://{bucket}/dir/")
        sizes = {line.split()[-1]: int(line.split()[-2]) for line in out.splitlines() if "s3://" in line}
        want = {f"s3://{bucket}/dir/big.bin": 40 << 20, f"s3://{bucket}/dir/small.bin": 4321}
        check(sizes == want, f"ls sizes {sizes}")
    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        ctx.assert_only_ciphertext(bucket, samples={"dir/big.bin": big, "dir/small.bin": small}, min_objects=2)
    with ctx.step(CLIENT, "del"):
        s3cmd("del", f"s3://{bucket}/dir/big.bin", f"s3://{bucket}/dir/small.bin")
        out = s3cmd("ls", "--recursive", f"s3://{bucket}")
        check(out.strip() == "", f"objects left: {out.strip()[:200]}")

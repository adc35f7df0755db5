"""rclone (Debian package), S3 remote in path style, configured by environment variables.
rclone reads a 32-hex ETag as the content's MD5 and compares listed sizes, so this is
where the ETag contract and exact sizes show."""

from ..context import check, random_file, text_file

CLIENT = "rclone"
REMOTE = "kura"


def version(ctx):
    return ctx.run("rclone", "version").splitlines()[0].strip()


def run(ctx):
    bucket = ctx.upstream.bucket_name(CLIENT)
    work = ctx.work / CLIENT
    # AWS_CA_BUNDLE is already removed by client_env (rclone 1.60 fails with it set).
    env = ctx.client_env(
        RCLONE_CONFIG_KURA_TYPE="s3",
        RCLONE_CONFIG_KURA_PROVIDER="Other",
        RCLONE_CONFIG_KURA_ENDPOINT=ctx.gateway_url,
        RCLONE_CONFIG_KURA_ACCESS_KEY_ID=ctx.access_key,
        RCLONE_CONFIG_KURA_SECRET_ACCESS_KEY=ctx.secret_key,
        RCLONE_CONFIG_KURA_REGION="us-east-1",
        RCLONE_CONFIG_KURA_FORCE_PATH_STYLE="true",
        RCLONE_CONFIG=str(work / "rclone.conf"),
    )
    work.mkdir(parents=True, exist_ok=True)
    (work / "rclone.conf").write_text("")  # everything is in the environment
    # No retries: see Ctx.client_env.
    env.update(RCLONE_RETRIES="1", RCLONE_LOW_LEVEL_RETRIES="1")
    rclone = lambda *a: ctx.run("rclone", *a, env=env)  # noqa: E731
    rclone_log = lambda *a: ctx.run("rclone", *a, env=env, with_stderr=True)  # noqa: E731
    remote = f"{REMOTE}:{bucket}"

    tree = work / "tree"
    (tree / "empty-dir-sibling").mkdir(parents=True)
    (tree / "empty-dir-sibling" / "empty.txt").write_bytes(b"")
    for i in range(12):
        random_file(tree / f"small/s-{i}.bin", 37 * i * i + 1, seed=500 + i)
    text_file(tree / "docs/readme.txt", 150_000, seed=5)
    big = random_file(tree / "big/twenty.bin", 20 << 20, seed=520)
    random_file(tree / "big/twenty-odd.bin", (20 << 20) + 12345, seed=521)

    with ctx.step(CLIENT, "mkdir"):
        rclone("mkdir", remote)
    with ctx.step(CLIENT, "copy tree (empty, small, 20 MiB)"):
        rclone("copy", tree, f"{remote}/tree")
        listed = rclone("lsf", "-R", "--files-only", f"{remote}/tree")
        check(len(listed.split()) == 16, f"lsf shows {len(listed.split())} files, expected 16")
    with ctx.step(CLIENT, "check (0 differences)"):
        out = rclone_log("check", tree, f"{remote}/tree")
        check("0 differences found" in out, f"check said: {out.strip()[-300:]}")
    with ctx.step(CLIENT, "check --download (0 differences)"):
        out = rclone_log("check", "--download", tree, f"{remote}/tree")
        check("0 differences found" in out, f"check said: {out.strip()[-300:]}")
    with ctx.step(CLIENT, "sync again (nothing transferred)"):
        out = rclone_log("sync", "-v", tree, f"{remote}/tree")
        copied = [line for line in out.splitlines() if "Copied" in line]
        check(not copied, f"second sync copied: {copied[:3]}")
    with ctx.step(CLIENT, "cat --offset --count"):
        data = big.read_bytes()
        for offset, count in [(0, 1), (65530, 20), (1 << 20, 3 << 20), (len(data) - 5, 100)]:
            got = ctx.run("rclone", "cat", "--offset", offset, "--count", count, f"{remote}/tree/big/twenty.bin", env=env, raw=True)
            check(got == data[offset : offset + count], f"cat --offset {offset} --count {count} differs")
    with ctx.step(CLIENT, "server-side copyto and moveto (20 MiB)"):
        # Within one remote rclone copies with CopyObject: the gateway sends the first 8 MiB
        # and has the upstream copy the rest.
        odd = (tree / "big/twenty-odd.bin").read_bytes()
        rclone("copyto", f"{remote}/tree/big/twenty-odd.bin", f"{remote}/copied/odd.bin")
        rclone("moveto", f"{remote}/copied/odd.bin", f"{remote}/copied/moved.bin")
        got = ctx.run("rclone", "cat", f"{remote}/copied/moved.bin", env=env, raw=True)
        check(got == odd, "the moved copy holds other bytes")
        listed = rclone("lsl", f"{remote}/copied")
        check(listed.split()[:1] == [str(len(odd))] and "moved.bin" in listed and "odd.bin" not in listed,
              f"lsl after copyto and moveto: {listed.strip()}")
    with ctx.step(CLIENT, "upstream holds only ciphertext"):
        ctx.assert_only_ciphertext(
            bucket, samples={"tree/big/twenty.bin": big, "tree/docs/readme.txt": tree / "docs/readme.txt"}, min_objects=16
        )
    with ctx.step(CLIENT, "purge"):
        rclone("purge", f"{remote}/tree")
        rclone("purge", f"{remote}/copied")
        left = rclone("lsf", "-R", remote)
        check(left.strip() == "", f"left after purge: {left.strip()[:200]}")


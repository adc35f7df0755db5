"""What every scenario gets: the gateway's address and credentials, a scratch directory,
command running, test data, content comparison, and the check that the upstream holds only
ciphertext. Also the step recorder that turns each operation into one row of the table."""

import contextlib
import hashlib
import os
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config

# SPEC 5.1: every kura object body starts with these bytes.
KURA_MAGIC = b"KURA"
# How much of a stored object the plaintext check reads (a range GET upstream).
PROBE_BYTES = 1 << 20


class StepFailed(Exception):
    """A check inside a step did not hold."""


@dataclass
class Row:
    client: str
    operation: str
    ok: bool
    seconds: float
    detail: str = ""


def check(condition, message):
    if not condition:
        raise StepFailed(message)


class Ctx:
    def __init__(self, *, work, gateway_url, public_url, access_key, secret_key, upstream, verbose):
        self.work = Path(work)
        self.gateway_url = gateway_url
        self.public_url = public_url
        self.access_key = access_key
        self.secret_key = secret_key
        self.upstream = upstream
        self.verbose = verbose
        self.rows = []
        self.versions = {}

    # -- recording --------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, client, operation):
        """Runs the body as one table row; a failure is recorded, never raised, so the
        client's later operations still run."""
        start = time.monotonic()
        row = Row(client, operation, ok=False, seconds=0.0)
        try:
            yield
            row.ok = True
        except Exception as e:  # noqa: BLE001 -- any failure of a real client is a result
            row.detail = f"{type(e).__name__}: {e}" if not isinstance(e, StepFailed) else str(e)
        row.seconds = time.monotonic() - start
        self.rows.append(row)
        mark = "ok  " if row.ok else "FAIL"
        print(f"  {mark} {client:10} {operation:40} {row.seconds:6.1f}s {row.detail[:300]}", flush=True)

    def record(self, client, operation, ok, detail="", seconds=0.0):
        self.rows.append(Row(client, operation, ok, seconds, detail))
        mark = "ok  " if ok else "FAIL"
        print(f"  {mark} {client:10} {operation:40} {seconds:6.1f}s {detail[:300]}", flush=True)

    # -- processes --------------------------------------------------------------------

    def client_env(self, **extra):
        """The environment a client runs in: the gateway's credentials, and none of the
        machine's AWS settings (profiles, CA bundles: rclone 1.60 fails on AWS_CA_BUNDLE)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AWS_") and not k.endswith("CA_BUNDLE") and not k.startswith("RESTIC_")
        }
        home = self.work / "home"
        home.mkdir(exist_ok=True)
        env.update(
            HOME=str(home),
            AWS_ACCESS_KEY_ID=self.access_key,
            AWS_SECRET_ACCESS_KEY=self.secret_key,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_REGION="us-east-1",
            AWS_CONFIG_FILE=str(home / "aws-config-none"),
            AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials-none"),
            AWS_EC2_METADATA_DISABLED="true",
            # Loopback has no transient faults: a retry would only hide a gateway bug (a
            # stalled response once passed here after aws-cli's 60 s read timeout).
            AWS_MAX_ATTEMPTS="1",
        )
        env.update(extra)
        return env

    def run(self, *cmd, env=None, input=None, timeout=1800, with_stderr=False, raw=False, user=None):
        """Runs a client command; a non-zero exit fails the step with its stderr. Returns
        stdout as text (with stderr after it, for clients that log there), or as bytes
        with `raw`. `user` runs it as that user (with that user's groups): for programs
        that refuse to run as root."""
        cmd = [str(c) for c in cmd]
        if self.verbose:
            print("    $", " ".join(cmd), flush=True)
        proc = subprocess.run(
            cmd,
            env=env if env is not None else self.client_env(),
            input=input,
            capture_output=True,
            timeout=timeout,
            **({"user": user, "group": user, "extra_groups": []} if user else {}),
        )
        if proc.returncode != 0:
            err = (proc.stderr or b"").decode(errors="replace").strip().splitlines()[-8:]
            out = (proc.stdout or b"").decode(errors="replace").strip().splitlines()[-4:]
            raise StepFailed(f"`{' '.join(cmd[:4])} ...` exited {proc.returncode}: " + " | ".join(err or out))
        if raw:
            return proc.stdout
        out = proc.stdout.decode(errors="replace")
        return out + proc.stderr.decode(errors="replace") if with_stderr else out

    # -- S3 clients for setup and checks ---------------------------------------------

    def gateway_s3(self, **config):
        """boto3 against the gateway (path style, no retries: see client_env); extra
        `botocore.config.Config` settings as keywords."""
        return boto3.client(
            "s3",
            endpoint_url=self.gateway_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, **config),
        )

    def assert_only_ciphertext(self, bucket, samples=None, min_objects=1):
        """Every object in the upstream bucket is a kura body, and none of the sample
        files' plaintext appears in what is stored: reads up to PROBE_BYTES of each."""
        up = self.upstream.s3()
        keys = {}
        for page in up.get_paginator("list_objects_v2").paginate(Bucket=self.upstream.bucket(bucket)):
            for obj in page.get("Contents", []):
                keys[obj["Key"]] = obj["Size"]
        check(len(keys) >= min_objects, f"upstream bucket holds {len(keys)} objects, expected >= {min_objects}")
        for key in keys:
            head = up.get_object(Bucket=self.upstream.bucket(bucket), Key=key, Range="bytes=0-3")["Body"].read()
            check(head == KURA_MAGIC, f"upstream object {key!r} does not start with the kura magic: {head!r}")
        for key, path in (samples or {}).items():
            check(key in keys, f"{key!r} not found upstream")
            size = os.path.getsize(path)
            check(keys[key] > size, f"{key!r}: stored size {keys[key]} is not larger than the plaintext's {size}")
            stored = up.get_object(
                Bucket=self.upstream.bucket(bucket), Key=key, Range=f"bytes=0-{PROBE_BYTES - 1}"
            )["Body"].read()
            with open(path, "rb") as f:
                plain = f.read(PROBE_BYTES)
            window = plain[len(plain) // 2 : len(plain) // 2 + 32]
            check(len(window) < 16 or window not in stored, f"{key!r}: plaintext found in the stored object")


# -- test data --------------------------------------------------------------------------


def random_file(path, size, seed):
    """Incompressible, reproducible bytes."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 8 << 20)
            f.write(rng.randbytes(n))
            left -= n
    return path


def text_file(path, size, seed):
    """Compressible, reproducible text."""
    rng = random.Random(seed)
    words = ["kura", "velero", "snapshot", "volume", "backup", "bucket", "segment", "restore", "cluster"]
    line_pool = [
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) + f" {i}\n" for i in range(4096)
    ]
    blob = "".join(line_pool).encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(blob))
            f.write(blob[:n])
            left -= n
    return path


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(root):
    """{relative path: sha256} of every regular file under root."""
    root = Path(root)
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(root))] = sha256_file(p)
    return out


def assert_same_tree(expected, actual):
    a, b = tree_digest(expected), tree_digest(actual)
    missing = sorted(set(a) - set(b))
    extra = sorted(set(b) - set(a))
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    check(not missing and not extra and not differ, f"trees differ: missing {missing[:3]}, extra {extra[:3]}, changed {differ[:3]}")
    return len(a)


def assert_same_file(expected, actual):
    check(sha256_file(expected) == sha256_file(actual), f"{actual} differs from {expected}")

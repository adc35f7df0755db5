"""The upstream S3 services the gateway forwards to: s3s-fs as a separate process (the
default), Garage as a single loopback node (`--upstream garage`), or a real bucket service
given by environment variables (`--upstream external`, never in CI). Also moto's server,
for the one scenario that needs a versioned bucket (`scenarios/versioned.py`)."""

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import botocore.handlers
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "target" / "conformance-tools"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s")


def stop_process(proc):
    """Stops a process this harness started, by its PID: SIGTERM, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Upstream:
    """Common part: where the upstream is and a boto3 client for the harness's checks."""

    name = "?"
    region = "us-east-1"
    proc = None

    def s3(self):
        client = boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            # As for B2 (and the B2-shaped upstream): no checksum headers unless required.
            config=Config(s3={"addressing_style": "path"},
                          request_checksum_calculation="when_required",
                          response_checksum_validation="when_required"),
        )
        # Listings of the upstream itself ask for real names: s3s-fs echoes encoding-type=url
        # without encoding, and botocore would then decode names such as `a+b` wrongly.
        for op in ("ListObjects", "ListObjectsV2", "ListObjectVersions"):
            client.meta.events.unregister(
                f"before-parameter-build.s3.{op}", botocore.handlers.set_list_objects_encoding_type_url
            )
        return client

    def bucket(self, name):
        """The upstream bucket a client-side bucket name maps to (the same here: the
        gateway passes bucket names through)."""
        return name

    def bucket_name(self, client):
        return f"conf-{client}"

    def on_free_port(self):
        """A free loopback port and fresh credentials, for an upstream this harness starts."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.access_key = "upstream-" + secrets.token_hex(4)
        self.secret_key = secrets.token_hex(20)

    def stop(self):
        stop_process(self.proc)


class S3sFs(Upstream):
    """s3s-fs in its own process (`conformance/tools`, `s3s-fs-upstream`): the store of
    kura's embedded default, which answers two things as S3 does where the s3s-fs binary
    does not (see that program's doc comment)."""

    name = "s3s-fs"

    def __init__(self, work):
        self.binary = ROOT / "target" / "release" / "s3s-fs-upstream"
        self.version = "s3s-fs 0.14.1 (conformance/tools s3s-fs-upstream, own process)"
        self.dir = Path(work) / "s3s-fs"
        self.dir.mkdir()
        self.on_free_port()

    def start(self, log):
        self.proc = subprocess.Popen(
            [self.binary, "--listen", f"127.0.0.1:{self.port}",
             "--access-key", self.access_key, "--secret-key", self.secret_key, self.dir],
            stdout=log, stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, self.proc, "s3s-fs")


class B2Shaped(S3sFs):
    """The default upstream behind a strict front that refuses, with Backblaze B2's error
    codes, every request B2 would refuse (`--upstream b2-shaped`; s3s-fs-upstream
    `--b2-shaped`, whose b2_shaped.rs lists the rules)."""

    name = "b2-shaped"

    def __init__(self, work):
        super().__init__(work)
        self.version = "s3s-fs 0.14.1 behind B2's S3 rules (s3s-fs-upstream --b2-shaped)"

    def start(self, log):
        self.proc = subprocess.Popen(
            [self.binary, "--listen", f"127.0.0.1:{self.port}", "--b2-shaped",
             "--access-key", self.access_key, "--secret-key", self.secret_key, self.dir],
            stdout=log, stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, self.proc, "s3s-fs (B2-shaped)")


class Garage(Upstream):
    """A single Garage node on loopback: config file, layout assign + apply, one key that
    may create buckets (the gateway creates them on the clients' behalf)."""

    name = "garage"

    def __init__(self, work):
        found = shutil.which("garage")
        self.binary = Path(found) if found else TOOLS / "bin" / "garage"
        self.version = subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.strip()
        self.dir = Path(work) / "garage"
        self.dir.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rpc, admin = free_port(), free_port()
        self.config = self.dir / "garage.toml"
        self.config.write_text(
            f"""metadata_dir = "{self.dir}/meta"
data_dir = "{self.dir}/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:{rpc}"
rpc_public_addr = "127.0.0.1:{rpc}"
rpc_secret = "{secrets.token_hex(32)}"

[s3_api]
s3_region = "{self.region}"
api_bind_addr = "127.0.0.1:{self.port}"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:{admin}"
"""
        )

    def garage(self, *args):
        out = subprocess.run(
            [self.binary, "-c", self.config, *args], capture_output=True, text=True, timeout=60
        )
        if out.returncode != 0:
            raise RuntimeError(f"garage {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def start(self, log):
        self.proc = subprocess.Popen(
            [self.binary, "-c", self.config, "server"], stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": "garage=warn"},
        )
        wait_for_port(self.port, self.proc, "garage")
        node = None
        for _ in range(50):
            try:
                node = self.garage("node", "id", "-q").strip().split("@")[0]
                break
            except RuntimeError:
                time.sleep(0.2)
        if not node:
            raise RuntimeError("garage node id: no answer")
        self.garage("layout", "assign", "-z", "dc1", "-c", "10G", node)
        self.garage("layout", "apply", "--version", "1")
        out = self.garage("key", "create", "kura-gateway")
        self.access_key = re.search(r"Key ID:\s*(\S+)", out).group(1)
        self.secret_key = re.search(r"Secret key:\s*(\S+)", out).group(1)
        self.garage("key", "allow", "--create-bucket", "kura-gateway")


class Moto(Upstream):
    """moto's S3 server (PyPI `moto[server]`, in the harness's virtualenv) on loopback: an
    S3 emulator written for tests, the closest stand-in for AWS S3 here, and the only
    upstream here that keeps object versions (`--upstream moto`; the versioned scenario
    starts its own). Older moto versions named the XML root of some answers differently
    from S3, which aws-sdk-s3 rejected; 5.x answers as S3 does."""

    name = "moto"

    def __init__(self, work):
        import moto  # noqa: PLC0415 -- only this upstream needs it

        self.binary = Path(sys.executable).parent / "moto_server"
        self.version = f"moto_server {moto.__version__}"
        # moto accepts any credentials.
        self.on_free_port()

    def start(self, log):
        self.proc = subprocess.Popen(
            [self.binary, "-H", "127.0.0.1", "-p", str(self.port)], stdout=log, stderr=subprocess.STDOUT
        )
        wait_for_port(self.port, self.proc, "moto_server")


class External(Upstream):
    """A real service (Backblaze B2, AWS S3): everything from the environment.

    KURA_CONFORMANCE_UPSTREAM_URL, KURA_CONFORMANCE_UPSTREAM_REGION, and the upstream
    credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; buckets are named
    KURA_CONFORMANCE_BUCKET_PREFIX-CLIENT and are created by the run (which leaves them
    behind: see conformance/README.md)."""

    name = "external"

    def __init__(self, work):
        env = os.environ
        self.url = env["KURA_CONFORMANCE_UPSTREAM_URL"]
        self.region = env.get("KURA_CONFORMANCE_UPSTREAM_REGION", "us-east-1")
        self.access_key = env["AWS_ACCESS_KEY_ID"]
        self.secret_key = env["AWS_SECRET_ACCESS_KEY"]
        self.prefix = env["KURA_CONFORMANCE_BUCKET_PREFIX"]
        self.version = f"external {self.url}"

    def bucket_name(self, client):
        return f"{self.prefix}-{client}"

    def start(self, log):
        pass


UPSTREAMS = {"s3s-fs": S3sFs, "b2-shaped": B2Shaped, "garage": Garage, "moto": Moto, "external": External}

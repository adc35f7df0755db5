"""`kura gateway` as its own process in front of an upstream, with a fresh key file and
one client key: the harness's gateway, and any scenario that needs one of its own."""

import os
import secrets
import subprocess
import urllib.request

from .upstreams import ROOT, Moto, free_port, stop_process, wait_for_port

KURA = ROOT / "target" / "release" / "kura"


def start_gateway(work, upstream, log, powers=(), secret_key=None):
    """Starts the gateway, waits until `/readyz` answers 200, and returns
    `(process, port, access_key, secret_key)`. Key file and stray files go into `work`.
    `powers` are given to the client credential (gateway/README.md, "Client powers"),
    which then comes from a config file; `secret_key` reuses another gateway's secret."""
    key_file = work / "kura-keys.toml"
    subprocess.run([KURA, "keys", "generate", "--out", key_file], check=True, capture_output=True)
    port = free_port()
    access_key, secret_key = "conformance", secret_key or secrets.token_hex(20)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=upstream.access_key,
        AWS_SECRET_ACCESS_KEY=upstream.secret_key,
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(work / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(work / "none"),
        KURA_LOG=os.environ.get("KURA_LOG", "info"),
    )
    config = []
    if powers:
        conf = work / "kura-gateway.toml"
        conf.write_text(
            f'[[credentials]]\naccess_key_id = "{access_key}"\nsecret_access_key_env = "CONFORMANCE_SECRET"\n'
            f'buckets = ["*"]\npowers = {list(powers)!r}\n'.replace("'", '"')
        )
        config = ["--config", conf]
        env.update(CONFORMANCE_SECRET=secret_key)
    else:
        env.update(KURA_ACCESS_KEY_ID=access_key, KURA_SECRET_ACCESS_KEY=secret_key)
    proc = subprocess.Popen(
        [KURA, "gateway", *config, "--listen", f"127.0.0.1:{port}", "--upstream", upstream.url,
         "--upstream-region", upstream.region, "--path-style", "--key-file", key_file],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    wait_for_port(port, proc, "kura gateway")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
        assert r.status == 200
    return proc, port, access_key, secret_key


class MotoGateway:
    """moto's S3 server and a gateway of its own in front of it, for scenarios that need an
    upstream that keeps versions (neither s3s-fs nor Garage does), whatever `--upstream`
    says. Logs go into `work`; `start` goes inside a step, `stop` into a `finally`."""

    def __init__(self, work):
        self.upstream = Moto(work)
        self.work = work
        self.up_log = open(work / "moto.log", "wb")
        self.gw_log = open(work / "gateway.log", "wb")
        self.proc = self.port = self.access_key = self.secret_key = None

    def start(self, **gateway_options):
        """Starts both; `gateway_options` as `start_gateway`'s (powers, secret_key)."""
        self.upstream.start(self.up_log)
        self.proc, self.port, self.access_key, self.secret_key = start_gateway(
            self.work, self.upstream, self.gw_log, **gateway_options
        )

    def stop(self):
        stop_process(self.proc)
        self.upstream.stop()
        self.up_log.close()
        self.gw_log.close()

"""What the scenarios made of a separate program share: running it and turning its
`ok SECONDS NAME` / `FAIL SECONDS NAME: DETAIL` lines into table rows (the Velero-shaped
Rust program and the Go programs under conformance/go, which conformance/run builds into
target/conformance-go in GOPATH mode against Debian's packages)."""

import subprocess

from ..upstreams import ROOT

GO_BIN = ROOT / "target" / "conformance-go"


def debian_version(package):
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    return out.stdout.strip() or "not installed"


def go_version():
    out = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.split()
    return out[2] if len(out) > 2 else "go missing"


def run_steps(ctx, client, cmd, env=None, timeout=600):
    """Runs `cmd` and records one row per step line it prints; a run that prints none is
    one failed row with its exit status and the end of its stderr."""
    proc = subprocess.run([str(c) for c in cmd], env=env if env is not None else ctx.client_env(),
                          capture_output=True, text=True, timeout=timeout)
    steps = 0
    for line in proc.stdout.splitlines():
        mark, _, rest = line.partition(" ")
        if mark not in ("ok", "FAIL"):
            continue
        secs, _, rest = rest.partition(" ")
        op, _, detail = rest.partition(": ") if mark == "FAIL" else (rest, "", "")
        ctx.record(client, op, mark == "ok", detail, float(secs))
        steps += 1
    if steps == 0:
        ctx.record(client, "run", False, f"exited {proc.returncode}: {proc.stderr.strip()[-500:]}")

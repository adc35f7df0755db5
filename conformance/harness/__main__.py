"""Entry point: start the upstream and `kura gateway`, run every client scenario, stop
what was started, print the table and `N passed, N failed`, and exit zero only when the
failures are exactly `conformance/known-failures`."""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import report
from .context import Ctx
from .gateway import KURA, start_gateway
from .scenarios import ALL, ON_DEMAND
from .upstreams import ROOT, UPSTREAMS, stop_process


def parse_args():
    p = argparse.ArgumentParser(prog="conformance/run", description=__doc__)
    p.add_argument("--upstream", choices=sorted(UPSTREAMS), default="s3s-fs")
    p.add_argument("--only", action="append", metavar="CLIENT", help="run only this client (repeatable); on-demand clients (rustic) run only when named")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory and logs")
    p.add_argument("--verbose", action="store_true", help="print every client command")
    p.add_argument("--update-readme", action="store_true", help="write the table into conformance/README.md, under this upstream's heading")
    p.add_argument("--restic-mib", type=int, default=1024, help="size of restic's backup set (default 1024)")
    return p.parse_args()


def main():
    args = parse_args()
    scenarios = [s for s in ALL if not args.only or s.CLIENT in args.only]
    scenarios += [s for s in ON_DEMAND if args.only and s.CLIENT in args.only]
    work = Path(tempfile.mkdtemp(prefix="kura-conformance-"))
    print(f"conformance: upstream {args.upstream}, scratch {work}", flush=True)
    upstream = UPSTREAMS[args.upstream](work)
    up_log = open(work / "upstream.log", "wb")
    gw_log = open(work / "gateway.log", "wb")
    gateway = None
    started = time.monotonic()
    try:
        upstream.start(up_log)
        gateway, port, ak, sk = start_gateway(work, upstream, gw_log)
        ctx = Ctx(
            work=work,
            gateway_url=f"http://127.0.0.1:{port}",
            public_url=f"http://localhost:{port}",
            access_key=ak,
            secret_key=sk,
            upstream=upstream,
            verbose=args.verbose,
        )
        ctx.restic_mib = args.restic_mib
        ctx.versions["upstream"] = upstream.version
        ctx.versions["kura"] = subprocess.run([KURA, "--version"], capture_output=True, text=True).stdout.strip()
        for scenario in scenarios:
            try:
                ctx.versions[scenario.CLIENT] = scenario.version(ctx)
            except Exception as e:  # noqa: BLE001 -- a missing tool is a failed row, not a crash
                ctx.versions[scenario.CLIENT] = f"unavailable ({e})"
            print(f"== {scenario.CLIENT} ({ctx.versions[scenario.CLIENT]})", flush=True)
            before = len(ctx.rows)
            try:
                scenario.run(ctx)
            except Exception as e:  # noqa: BLE001 -- the scenario's setup failed
                ctx.record(scenario.CLIENT, "scenario setup", False, f"{type(e).__name__}: {e}")
            if gateway.poll() is not None:
                ctx.record(scenario.CLIENT, "gateway still running", False, f"exited {gateway.returncode}")
                break
            if len(ctx.rows) == before:
                ctx.record(scenario.CLIENT, "scenario ran", False, "no operation recorded")
    finally:
        stop_process(gateway)
        upstream.stop()
        up_log.close()
        gw_log.close()
    elapsed = time.monotonic() - started

    known = report.load_known_failures(ROOT / "conformance" / "known-failures")
    table = report.markdown(ctx.rows, ctx.versions, args.upstream, known)
    print()
    print(table)
    if args.update_readme:
        section = args.upstream + (f" --only {' --only '.join(args.only)}" if args.only else "")
        report.update_readme(ROOT / "conformance" / "README.md", table, section)
    failed = {(r.client, r.operation) for r in ctx.rows if not r.ok}
    if args.only:
        known = {k: v for k, v in known.items() if k[0] in args.only}
    unexpected = sorted(failed - set(known))
    fixed = sorted(set(known) - failed)
    passed = sum(r.ok for r in ctx.rows)
    for c, o in unexpected:
        print(f"unexpected failure: {c} / {o}")
    for c, o in fixed:
        print(f"listed in known-failures but passed (remove it): {c} / {o}")
    if unexpected or fixed or args.keep:
        print(f"logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"conformance took {elapsed:.0f} s")
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if unexpected or fixed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The results table (client x operation, with versions) and `conformance/known-failures`."""

import re
from pathlib import Path

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"


def load_known_failures(path):
    """`CLIENT | OPERATION | reason` per line; `#` starts a comment. Returns
    {(client, operation): reason}."""
    known = {}
    path = Path(path)
    if not path.exists():
        return known
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            raise SystemExit(f"{path}:{n}: expected `CLIENT | OPERATION | reason`")
        known[(parts[0], parts[1])] = parts[2]
    return known


def markdown(rows, versions, upstream, known):
    lines = [f"Upstream: {versions.get('upstream', upstream)}; gateway: {versions.get('kura', '?')}.", ""]
    lines += ["| client | version | operation | result | time |", "|---|---|---|---|---|"]
    last = None
    for r in rows:
        version = versions.get(r.client, "") if r.client != last else ""
        client = r.client if r.client != last else ""
        last = r.client
        if r.ok:
            result = "pass"
        elif (r.client, r.operation) in known:
            result = f"known failure: {known[(r.client, r.operation)]}"
        else:
            result = "**FAIL**: " + re.sub(r"\s+", " ", r.detail)[:200].replace("|", "\\|")
        lines.append(f"| {client} | {version} | {r.operation} | {result} | {r.seconds:.1f} s |")
    passed = sum(r.ok for r in rows)
    lines += ["", f"{passed} passed, {len(rows) - passed} failed"]
    return "\n".join(lines)


def update_readme(path, table):
    text = Path(path).read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    Path(path).write_text(text[:start] + "\n" + table + "\n" + text[end:])

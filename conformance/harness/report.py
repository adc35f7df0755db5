"""The results table (client x operation, with versions) and `conformance/known-failures`."""

import re
from pathlib import Path

def markers(section):
    """The comments that hold one section's table in the README."""
    return f"<!-- results:{section}:begin -->", f"<!-- results:{section}:end -->"


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


def update_readme(path, table, section):
    """Writes `table` between the markers of `section` (the upstream, and the clients when
    the run named some); a first run of a section adds it after the last table, under a
    heading that says how to run it again."""
    begin, end = markers(section)
    text = Path(path).read_text()
    if begin not in text:
        last = text.rindex(":end -->") + len(":end -->")
        upstream, _, only = section.partition(" ")
        command = f"conformance/run --upstream {upstream} {only} --update-readme".replace("  ", " ")
        heading = f"On {upstream}" + (f" ({only.replace('--only ', '')} only)" if only else "")
        section = f"\n\n### {heading}\n\n`{command}`:\n\n{begin}\n{end}"
        text = text[:last] + section + text[last:]
    start, stop = text.index(begin) + len(begin), text.index(end)
    Path(path).write_text(text[:start] + "\n" + table + "\n" + text[stop:])

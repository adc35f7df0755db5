#!/usr/bin/env python3
"""Seeds fuzz/corpus/body with the bodies of keys/tests/vectors.

The `body` target reads one split byte and then a body; without valid bodies to mutate,
libFuzzer rarely gets past the header MAC. Each vector's body is the bytes after its first
blank line; each is written behind split bytes 0, 7 and 255.
"""
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
out = root / "fuzz" / "corpus" / "body"
out.mkdir(parents=True, exist_ok=True)
count = 0
for vector in sorted((root / "keys" / "tests" / "vectors").iterdir()):
    data = vector.read_bytes()
    body = data[data.index(b"\n\n") + 2 :]
    for split in (0, 7, 255):
        (out / f"seed-{vector.name}-{split}").write_bytes(bytes([split]) + body)
        count += 1
print(f"{count} seeds in {out}")

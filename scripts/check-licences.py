#!/usr/bin/env python3
"""Fails when a dependency's licence expression has no Apache-2.0-compatible choice.

Reads `cargo metadata`; an expression passes when one of its OR-alternatives consists only
of permissive licences (AND-terms must all be permissive)."""
import json
import re
import subprocess
import sys

PERMISSIVE = {
    "MIT", "Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-2-Clause", "BSD-3-Clause",
    "ISC", "Unicode-3.0", "Unicode-DFS-2016", "Unlicense", "Zlib", "CC0-1.0", "0BSD",
    "BSL-1.0", "MPL-2.0", "CDLA-Permissive-2.0",
}


def ok(expr: str) -> bool:
    expr = expr.replace("/", " OR ").replace("(", " ").replace(")", " ")
    for alt in re.split(r"\s+OR\s+", expr):
        terms = [t.strip() for t in re.split(r"\s+AND\s+", alt)]
        if all(t in PERMISSIVE for t in terms):
            return True
    return False


meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--locked"]))
ours = {p["id"] for p in meta["packages"] if p["source"] is None}
bad = [(p["name"], p.get("license")) for p in meta["packages"]
       if p["id"] not in ours and not ok(p.get("license") or "")]
for name, lic in bad:
    print(f"licence not Apache-2.0 compatible: {name}: {lic}", file=sys.stderr)
print(f"check-licences: {len(meta['packages']) - len(ours)} dependencies, {len(bad)} problems")
sys.exit(1 if bad else 0)

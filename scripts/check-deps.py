#!/usr/bin/env python3
"""The dependency policy, offline (CI has no network): fails on any breach.

- licences: every dependency's licence expression has an Apache-2.0-compatible choice
  (one OR-alternative made only of permissive licences);
- sources: every dependency comes from crates.io (no git or foreign registry);
- bans: no crate of BANNED (each with its reason and replacement);
- advisories: no locked version is affected by a RustSec advisory recorded in
  deps/advisories.json (`scripts/update-advisories.py` records them from an
  advisory-db checkout), unless deps/advisories-accepted.json names it with a reason.

Reads `cargo metadata --locked` and Cargo.lock."""
import json
import pathlib
import re
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent

PERMISSIVE = {
    "MIT", "Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-2-Clause", "BSD-3-Clause",
    "ISC", "Unicode-3.0", "Unicode-DFS-2016", "Unlicense", "Zlib", "CC0-1.0", "0BSD",
    "BSL-1.0", "MPL-2.0", "CDLA-Permissive-2.0",
}
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
BANNED = {
    "rustls-pemfile": "unmaintained (RUSTSEC-2025-0134): rustls-pki-types' PemObject reads PEM",
    "openssl": "one TLS stack: rustls (with ring)",
    "openssl-sys": "one TLS stack: rustls (with ring)",
}


def licence_ok(expr: str) -> bool:
    expr = expr.replace("/", " OR ").replace("(", " ").replace(")", " ")
    for alt in re.split(r"\s+OR\s+", expr):
        terms = [t.strip() for t in re.split(r"\s+AND\s+", alt)]
        if all(t in PERMISSIVE for t in terms):
            return True
    return False


def version(v: str):
    """A comparable semver: (major, minor, patch, is_release, prerelease parts)."""
    core, _, pre = v.strip().partition("-")
    core = core.partition("+")[0]
    nums = [int(x) for x in core.split(".")] + [0, 0, 0]
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else ()
    return (nums[0], nums[1], nums[2], 0 if pre else 1, parts)


def upper(op: str, b, given: int):
    """The exclusive upper bound of `~b` or `^b` (`given`: how many of b's numbers were written)."""
    major, minor, patch = b[:3]
    if op == "~":
        return (major, minor + 1, 0) if given >= 2 else (major + 1, 0, 0)
    if major > 0 or given == 1:
        return (major + 1, 0, 0)
    if minor > 0 or given == 2:
        return (0, minor + 1, 0)
    return (0, 0, patch + 1)


def matches(v: str, req: str) -> bool:
    """Whether version `v` meets requirement `req` (comma-separated clauses, all true)."""
    ver = version(v)
    for clause in req.split(","):
        clause = clause.strip()
        m = re.match(r"^(>=|<=|>|<|=|\^|~)?\s*(.+)$", clause)
        if not m:
            raise ValueError(f"bad requirement {req!r}")
        op, bound = m.group(1) or "^", m.group(2)
        b = version(bound)
        given = len(bound.partition("-")[0].split("."))
        if op == ">=" and not ver >= b:
            return False
        if op == ">" and not ver > b:
            return False
        if op == "<=" and not ver <= b:
            return False
        if op == "<" and not ver < b:
            return False
        if op == "=" and not ver == b:
            return False
        if op in ("^", "~"):
            if ver < b or ver[:3] >= upper(op, b, given):
                return False
    return True


def affected(v: str, adv: dict) -> bool:
    return not any(matches(v, r) for r in adv["patched"] + adv["unaffected"])


def self_test() -> None:
    """The requirement forms advisory-db uses, checked at every run."""
    cases = [
        ("0.17.14", ">= 0.17.12", True), ("0.17.8", ">= 0.17.12", False),
        ("0.103.13", ">= 0.103.13, < 0.104.0-alpha.1", True),
        ("0.104.0-alpha.2", ">= 0.103.13, < 0.104.0-alpha.1", False),
        ("0.104.0-alpha.7", ">= 0.104.0-alpha.7", True), ("0.104.0", ">= 0.104.0-alpha.7", True),
        ("0.3.5", "^0.3.1", True), ("0.4.0", "^0.3.1", False), ("1.9.0", "^1.2", True),
        ("2.0.0", "^1.2", False), ("0.0.3", "^0.0.3", True), ("0.0.4", "^0.0.3", False),
        ("1.2.9", "~1.2.3", True), ("1.3.0", "~1.2.3", False), ("1.4.0", "1.2", True),
        ("0.9.0", "< 0.1", False), ("0.0.9", "< 0.1", True), ("1.0.0", "= 1.0.0", True),
    ]
    for v, req, want in cases:
        if matches(v, req) != want:
            raise SystemExit(f"check-deps: self-test: {v} against {req!r} should be {want}")
    adv = {"patched": [">= 0.17.12"], "unaffected": ["< 0.17.0"]}
    if not affected("0.17.5", adv) or affected("0.16.20", adv) or affected("0.17.12", adv):
        raise SystemExit("check-deps: self-test: affected() is wrong")


def main() -> int:
    self_test()
    problems = []
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT))
    deps = [p for p in meta["packages"] if p["source"] is not None]
    for p in deps:
        if not licence_ok(p.get("license") or ""):
            problems.append(f"licence not Apache-2.0 compatible: {p['name']}: {p.get('license')}")
        if p["source"] != CRATES_IO:
            problems.append(f"source not crates.io: {p['name']} {p['version']}: {p['source']}")
        if p["name"] in BANNED:
            problems.append(f"banned crate {p['name']} {p['version']}: {BANNED[p['name']]}")
    record = json.loads((ROOT / "deps" / "advisories.json").read_text())
    accepted_file = ROOT / "deps" / "advisories-accepted.json"
    accepted = json.loads(accepted_file.read_text()) if accepted_file.exists() else {}
    lock = tomllib.loads((ROOT / "Cargo.lock").read_text())
    by_name = {}
    for a in record["advisories"]:
        by_name.setdefault(a["package"], []).append(a)
    # the workspace's own crates (no `source`) are not crates.io's: no advisory names them
    locked = [p for p in lock["package"] if "source" in p]
    unrecorded = sorted({p["name"] for p in locked} - set(record.get("crates", [])))
    if unrecorded:
        problems.append(f"crates whose advisories are not recorded: {', '.join(unrecorded)}: run "
                        "scripts/update-advisories.py on an advisory-db checkout and commit deps/")
    hits = 0
    for p in locked:
        for a in by_name.get(p["name"], []):
            if a["withdrawn"] or not affected(p["version"], a):
                continue
            hits += 1
            what = f"{a['id']} ({a['informational'] or 'vulnerability'}): {p['name']} {p['version']}: {a['title']}"
            if a["id"] in accepted:
                print(f"check-deps: accepted {what}: {accepted[a['id']]}")
            else:
                problems.append(f"advisory {what}; patched: {', '.join(a['patched']) or 'none'}")
    for m in problems:
        print(f"check-deps: {m}", file=sys.stderr)
    print(f"check-deps: {len(deps)} dependencies from crates.io, {len(record['advisories'])} advisories "
          f"recorded (advisory-db {record['commit'][:12]}, {record['date']}), {hits} affecting a locked "
          f"version, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Records the RustSec advisories of the crates in Cargo.lock into deps/advisories.json.

Usage: scripts/update-advisories.py ADVISORY_DB_DIR   (a checkout of rustsec/advisory-db)

The record is what `scripts/check-deps.py` checks offline (CI has no network): every
advisory, by any version, of a crate name the lock file holds, with its affected ranges.
Run it when the lock file changes or to refresh the advisories, and commit the result."""
import json
import pathlib
import re
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def locked_names() -> set[str]:
    lock = tomllib.loads((ROOT / "Cargo.lock").read_text())
    return {p["name"] for p in lock["package"]}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    db = pathlib.Path(sys.argv[1])
    crates = db / "crates"
    if not crates.is_dir():
        print(f"update-advisories: {db} has no crates/ (not an advisory-db checkout)", file=sys.stderr)
        return 2
    names = locked_names()
    out = []
    for name in sorted(names):
        for f in sorted((crates / name).glob("RUSTSEC-*.md")) if (crates / name).is_dir() else []:
            text = f.read_text()
            m = re.search(r"```toml\n(.*?)\n```", text, re.S)
            if not m:
                continue
            meta = tomllib.loads(m.group(1))
            adv, versions = meta.get("advisory", {}), meta.get("versions", {})
            title = next((l[2:].strip() for l in text[m.end():].splitlines() if l.startswith("# ")), "")
            out.append({
                "id": adv.get("id", f.stem),
                "package": adv.get("package", name),
                "title": title,
                "informational": adv.get("informational"),
                "withdrawn": bool(adv.get("withdrawn")),
                "patched": versions.get("patched", []),
                "unaffected": versions.get("unaffected", []),
            })
    try:
        commit = subprocess.check_output(["git", "-C", str(db), "rev-parse", "HEAD"], text=True).strip()
        date = subprocess.check_output(["git", "-C", str(db), "log", "-1", "--format=%cs"], text=True).strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        commit, date = "unknown", "unknown"
    record = {"source": "https://github.com/rustsec/advisory-db", "commit": commit, "date": date,
              "crates": sorted(names), "advisories": out}
    (ROOT / "deps" / "advisories.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"update-advisories: {len(out)} advisories of {len(names)} locked crate names (db {commit[:12]}, {date})")
    return 0


sys.exit(main())

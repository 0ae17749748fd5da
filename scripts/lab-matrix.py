#!/usr/bin/env python3
"""Reachability matrix of a running lab: every pod probes every declared port of every
other pod (TCP and UDP, same node and across nodes) with `zovn lab probe`, and every node
pings every pod through its management port. Prints a table; exits 1 if anything that
should be reachable is not.  Usage: lab-matrix.py ZOVN DIR"""
import json
import re
import subprocess
import sys

zovn, lab_dir = sys.argv[1], sys.argv[2]


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


pods = json.loads(run(zovn, "lab", "get", "pods", "-o", "json", "--dir", lab_dir).stdout)["items"]
pods = [p for p in pods if p.get("status", {}).get("podIP")]
targets = []
for p in pods:
    for c in p["spec"].get("containers", []):
        for port in c.get("ports", []):
            proto = port.get("protocol", "TCP").upper()
            if proto in ("TCP", "UDP"):
                targets.append((p, port["containerPort"], proto))
name = lambda p: f'{p["metadata"]["namespace"]}/{p["metadata"]["name"]}'
node = lambda p: p["spec"]["nodeName"]

cols = [f'{name(t)}:{port}/{proto.lower()}' for t, port, proto in targets]
width = max(len(c) for c in cols + ["from \\ to"]) + 2
print("from \\ to".ljust(16) + "".join(c.rjust(width) for c in cols))
failures = 0
for src in pods:
    row = name(src).ljust(16)
    for t, port, proto in targets:
        if name(t) == name(src):
            row += "-".rjust(width)
            continue
        args = [zovn, "lab", "probe", name(src), f'{t["status"]["podIP"]}:{port}', "--dir", lab_dir]
        if proto == "UDP":
            args.append("--udp")
        ok = run(*args).returncode == 0
        failures += not ok
        where = "same" if node(src) == node(t) else "cross"
        row += (f'{"ok" if ok else "FAIL"} ({where})').rjust(width)
    print(row)

status = run(zovn, "lab", "status", "--dir", lab_dir).stdout
netns = []  # node namespaces: "<prefix>n<i>" in the `netns:` line
for line in status.splitlines():
    if line.startswith("netns:"):
        netns = [n.strip() for n in line[6:].split(",") if re.search(r"n\d+$", n.strip())]
print()
for ns in netns:
    row = f"host {ns}".ljust(16)
    for p in pods:
        ok = run("ip", "netns", "exec", ns, "ping", "-c1", "-W2", p["status"]["podIP"]).returncode == 0
        failures += not ok
        row += f' {name(p)} {"ok" if ok else "FAIL"} '
    print(row + " (ping via the management port)")
print(f"\nreachability: {failures} failures")
sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""Renders docs/suite/table-cgo.md (docs/suite/README.md) from the condensed measurements.

Usage: table.py BEFORE.json AFTER.json [TOP]

Both files are condense.py's output for the same pass. It prints, in
Markdown, each package's elapsed seconds before and after, then the TOP
slowest top-level tests (default 10) of each package with their seconds
before and after ("–" where a test did not run in that measurement, "skip"
where it skipped).
"""
import json
import sys


def load(path):
    with open(path) as f:
        return {p["package"]: p for p in json.load(f)["packages"]}


def cell(t):
    if t is None:
        return "–"
    if t["result"] == "skip":
        return "skip"
    s = "%.1f" % t["elapsed_s"]
    return s if t["result"] == "pass" else s + " (" + t["result"] + ")"


def pkgcell(p):
    if "elapsed_s" not in p:
        return "–" if not p else "(" + p.get("result", "unfinished") + ")"
    s = "%.1f" % p["elapsed_s"]
    return s if p.get("result") == "pass" else s + " (" + p["result"] + ")"


def short(pkg):
    return pkg.replace("github.com/pfedmma/pfedmma/", "")


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: table.py BEFORE.json AFTER.json [TOP]")
    before, after = load(sys.argv[1]), load(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) == 4 else 10
    pkgs = sorted(set(before) | set(after))
    print("| package | before (s) | after (s) |")
    print("|---|---:|---:|")
    for p in pkgs:
        b, a = before.get(p, {}), after.get(p, {})
        print("| %s | %s | %s |" % (short(p), pkgcell(b), pkgcell(a)))
    for p in pkgs:
        bt = {t["test"]: t for t in before.get(p, {}).get("tests", [])}
        at = {t["test"]: t for t in after.get(p, {}).get("tests", [])}
        names = sorted(set(bt) | set(at), key=lambda n: -max(bt.get(n, {}).get("elapsed_s", 0), at.get(n, {}).get("elapsed_s", 0)))
        print()
        print("%s, the %d slowest tests:" % (short(p), min(top, len(names))))
        print()
        print("| test | before (s) | after (s) |")
        print("|---|---:|---:|")
        for n in names[:top]:
            print("| %s | %s | %s |" % (n, cell(bt.get(n)), cell(at.get(n))))


if __name__ == "__main__":
    main()

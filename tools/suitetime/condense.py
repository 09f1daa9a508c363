#!/usr/bin/env python3
"""Condenses `go test -json` output into the suite's timing evidence.

Usage: condense.py PASS LABEL < go-test.json > docs/suite/PASS/LABEL.json

PASS is "cgo" (the main pass) or "purego" (make test's -tags purego pass);
LABEL names the measurement (e.g. before-1, after-1). The output holds, per
package, its elapsed seconds and result, and each top-level test's elapsed
seconds and result (subtests are folded into their parent), slowest first.
Only the standard library is used.
"""
import datetime
import json
import sys


def seconds(stamp):
    """Seconds since the epoch of test2json's RFC 3339 time (UTC)."""
    day, _, clock = stamp.rstrip("Z").partition("T")
    hms, _, frac = clock.partition(".")
    t = datetime.datetime.strptime(day + "T" + hms, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + float("0." + (frac or "0"))


def condense(lines):
    """Each package's elapsed time and result, and its top-level tests'.

    A test that started and never reported a result (the binary timed out
    or was stopped) is listed as "unfinished" with the seconds from its
    start to the package's last event; such a package's result is
    "unfinished" too unless test2json reported one.
    """
    pkgs, started, last = {}, {}, {}
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        pkg, act, test = e.get("Package"), e.get("Action"), e.get("Test")
        if not pkg:
            continue
        p = pkgs.setdefault(pkg, {"package": pkg, "tests": []})
        if "Time" in e:
            last[pkg] = seconds(e["Time"])
        if act == "run" and test and "/" not in test:
            started[(pkg, test)] = seconds(e["Time"])
        if act not in ("pass", "fail", "skip"):
            continue
        if not test:
            p["elapsed_s"] = e.get("Elapsed", 0)
            p["result"] = act
        elif "/" not in test:
            started.pop((pkg, test), None)
            p["tests"].append({"test": test, "elapsed_s": e.get("Elapsed", 0), "result": act})
    for (pkg, test), t0 in started.items():
        pkgs[pkg]["tests"].append({"test": test, "elapsed_s": round(last[pkg] - t0, 2), "result": "unfinished"})
    for p in pkgs.values():
        p.setdefault("result", "unfinished")
        p["tests"].sort(key=lambda t: -t["elapsed_s"])
    return sorted(pkgs.values(), key=lambda p: p["package"])


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: condense.py PASS LABEL < go-test.json")
    out = {"pass": sys.argv[1], "label": sys.argv[2], "packages": condense(sys.stdin)}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

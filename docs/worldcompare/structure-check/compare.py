"""Compares each method's last-round record of a/ and b/ with ../all/'s (run from this folder)."""
import json


def last(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        out[r["method"]] = r
    return out


before = {**last("../all/a-stopped/metrics.jsonl"), **last("../all/b-rest/metrics.jsonl")}
after = {**last("a/metrics.jsonl"), **last("b/metrics.jsonl")}
for m, r in after.items():
    b = before[m]
    same = r["mean"] == b["mean"] and [c["metrics"] for c in r["clients"]] == [c["metrics"] for c in b["clients"]]
    print(f"{m:14s} round {r['round']}: {'identical' if same else 'DIFFERENT'}")

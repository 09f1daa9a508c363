#!/bin/sh
# The measurements behind README's "Precision: auto" (issue 39), on an idle
# machine: the CPU, the float32 and bfloat16 GEMM rates at ViT-B/16's shapes
# (bf16 with the frozen weights packed once into oneDNN's layout, and read as
# stored, the path before packing), then pFedMMA's training and evaluation
# images/s in fp32, bf16 and auto (which says what it chose). Writes into
# $OUT (default docs/precision/<cpu-kind>): version.txt, gemm.txt and
# train-{fp32,bf16,auto}.json, plus load.txt (the load before and after).
#   sh docs/precision/measure.sh [STEPS]
set -eu
steps=${1:-5}
here=$(cd "$(dirname "$0")/../.." && pwd)
kind=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//; s/[^A-Za-z0-9]\{1,\}/-/g; s/-$//')
out=${OUT:-$here/docs/precision/$kind}
mkdir -p "$out"
cd "$here"
go build -o "$out/pfedmma" ./cmd/pfedmma
load() { printf '%s  load %s\n' "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"; }
: >"$out/load.txt"
load
"$out/pfedmma" version >"$out/version.txt" 2>&1
go test -run '^$' -bench 'ViTShapes' -benchtime 5x ./gemm >"$out/gemm.txt"
load
for p in fp32 bf16 auto; do
	"$out/pfedmma" bench train --precision $p --steps "$steps" --json >"$out/train-$p.json"
	load
done
rm -f "$out/pfedmma"
cat "$out/version.txt" "$out/gemm.txt" "$out/load.txt"

#!/bin/sh
# One sitting: the authors' pFedMMA timed by reference/pfedmma/pfedmma_ref.py, then
# `pfedmma bench train` in fp32 and in bf16 against it, on the same machine in the
# same hour. Prints the load before and after each part, the reference's
# configuration (PyTorch build, BLAS, threads) beside every ratio, the like-for-like
# (online) rows first and the cached rows after them (what pfedmma adds).
#
#   sh reference/pfedmma/sitting.sh /path/to/the/authors/pFedMMA/checkout [STEPS]
#
# Needs Debian's python3-torch (apt-get install python3-torch) and a Go toolchain
# (the pfedmma binary is built from this checkout, or taken from $PFEDMMA).
# Writes ref.json and the two tables into $OUT (default: a fresh temporary folder).
# Runtime on an idle 2-core machine with STEPS=10: about 12 minutes (estimated; 44 minutes
# with STEPS=5 on a machine at load 15-24).
set -eu
repo=${1:?usage: sh reference/pfedmma/sitting.sh AUTHORS_CHECKOUT [STEPS]}
steps=${2:-10}
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
if [ -z "${PFEDMMA:-}" ]; then
	(cd "$here" && go build -o "$out/pfedmma" ./cmd/pfedmma)
	PFEDMMA=$out/pfedmma
fi
load() { printf '%s  load %s\n' "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1-3 /proc/loadavg)"; }
start=$(date +%s)

echo "== reference: the authors' CustomCLIP under PyTorch ($steps steps each)"
load
/usr/bin/python3 "$here/reference/pfedmma/pfedmma_ref.py" --repo "$repo" --steps "$steps" >"$out/ref.json"
cat "$out/ref.json"
load

for prec in fp32 bf16; do
	echo
	echo "== pfedmma bench train --precision $prec --reference ref.json"
	load
	"$PFEDMMA" bench train --steps "$steps" --precision "$prec" --reference "$out/ref.json" | tee "$out/train-$prec.txt"
	load
done
echo
echo "sitting took $(($(date +%s) - start)) s; files in $out"

#!/bin/sh
# One sitting for every method with a reference harness: for each method in
# turn, the authors' code timed by reference/<method>/<method>_ref.py, then
# `pfedmma bench train --method M` against that reference in fp32 on the
# cached production path and, with --uncached (the frozen records recomputed
# every step, like for like), in fp32 and bf16 (where the method supports it), so both sides of each ratio are
# measured minutes apart on the same machine. Writes the JSON of every run
# and a markdown table (table.md) into $OUT (default: a fresh temporary folder).
#
#   PFEDMMA_REPO=/tmp/pfedmma-ref FEDOTP_REPO=/tmp/fedotp \
#   CLIPADAPTER_REPO=/tmp/clip-adapter CLIPLORA_REPO=/tmp/clip-lora \
#       sh reference/common/sitting_all.sh [STEPS] [METHOD...]
#
# Checkouts (git clone of the authors' repositories; a method whose checkout
# is not given is skipped, and says so):
#   PFEDMMA_REPO      github.com/sajjad-ucsb/pFedMMA   pfedmma, promptfl, fedpgp
#                                                      (and clip/model.py for clip_adapter)
#   FEDOTP_REPO       github.com/HongxiaLee/FedOTP     fedotp
#   CLIPADAPTER_REPO  github.com/gaopengcuhk/CLIP-Adapter  clip_adapter
#   CLIPLORA_REPO     github.com/MaxZanella/CLIP-LoRA  clip_lora
#   PFEDMOAP_REPO     github.com/ljaiverson/pFedMoAP   pfedmoap
#   FEDTPG_REPO       github.com/boschresearch/FedTPG  fedtpg
#   PROMPTFOLIO_REPO  github.com/PanBikang/PromptFolio promptfolio
#   COOP_REPO         github.com/KaiyangZhou/CoOp      cocoop
#   KGCOOP_REPO       github.com/htyao89/KgCoOp        kgcoop
#   MAPLE_REPO        github.com/muzairkhattak/multimodal-prompt-learning  maple
#   PMFLT_REPO        github.com/Yuqin-G/PMFLT         fedpha, fedclip
#   DPFPL_REPO        github.com/linhhtran/DP-FPL      dpfpl
#   FEDMVP_REPO       github.com/mainaksingha01/FedMVP fedmvp (pfedmma's side tokenises
#                                                      the descriptions: CLIP_VOCAB below)
#   CLIP_VOCAB        CLIP's bpe_simple_vocab_16e6.txt.gz, given to `pfedmma bench train
#                     --method fedmvp --vocab` (default ../shared/clip-vocab/...)
# STEPS (default 10) timed steps on each side; METHOD... limits the sitting
# to those methods. REF_ARGS and BENCH_ARGS add flags to every harness and every
# `pfedmma bench train` (for a smoke test only, e.g. REF_ARGS="--batch 2"
# BENCH_ARGS="--batch 2": pfedmma refuses a reference of another batch or image size)
# Needs Debian's python3-torch (/usr/bin/python3) and a Go
# toolchain (pfedmma is built from this checkout, or taken from $PFEDMMA).
# Runtime on an idle 2-core machine with STEPS=10: roughly 10-15 minutes per
# method (estimated, not measured).
set -eu
steps=${1:-10}
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
py=${PYTHON:-/usr/bin/python3}
if [ -z "${PFEDMMA:-}" ]; then
	(cd "$here" && go build -o "$out/pfedmma" ./cmd/pfedmma)
	PFEDMMA=$out/pfedmma
fi
load() { printf '%s  load %s\n' "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1-3 /proc/loadavg)"; }
# the CPU both sides ran on, recorded beside every ratio (cpu.txt, table.md):
# its model and the flags that decide the fastest GEMM path
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx512f|avx512_bf16|amx_bf16|avx512_fp16' | tr '\n' ' ')
printf '%s (%s)\n' "$cpu" "${flags% }" >"$out/cpu.txt"
methods=${*:-pfedmma promptfl fedpgp fedotp clip_adapter clip_lora pfedmoap fedtpg promptfolio cocoop kgcoop maple fedpha fedclip dpfpl fedmvp}
start=$(date +%s)

# harness METHOD: prints "script repo-args" for METHOD's harness, or nothing
# when its checkout is not given.
harness() {
	case $1 in
	pfedmma) [ -n "${PFEDMMA_REPO:-}" ] && echo "pfedmma/pfedmma_ref.py --repo $PFEDMMA_REPO" ;;
	promptfl) [ -n "${PFEDMMA_REPO:-}" ] && echo "promptfl/promptfl_ref.py --repo $PFEDMMA_REPO" ;;
	fedpgp) [ -n "${PFEDMMA_REPO:-}" ] && echo "fedpgp/fedpgp_ref.py --repo $PFEDMMA_REPO" ;;
	fedotp) [ -n "${FEDOTP_REPO:-}" ] && echo "fedotp/fedotp_ref.py --repo $FEDOTP_REPO" ;;
	clip_adapter) [ -n "${CLIPADAPTER_REPO:-}" ] && [ -n "${PFEDMMA_REPO:-}" ] &&
		echo "clipadapter/clipadapter_ref.py --repo $CLIPADAPTER_REPO --clip-repo $PFEDMMA_REPO" ;;
	clip_lora) [ -n "${CLIPLORA_REPO:-}" ] && echo "cliplora/cliplora_ref.py --repo $CLIPLORA_REPO" ;;
	pfedmoap) [ -n "${PFEDMOAP_REPO:-}" ] && echo "pfedmoap/pfedmoap_ref.py --repo $PFEDMOAP_REPO" ;;
	fedtpg) [ -n "${FEDTPG_REPO:-}" ] && echo "fedtpg/fedtpg_ref.py --repo $FEDTPG_REPO" ;;
	promptfolio) [ -n "${PROMPTFOLIO_REPO:-}" ] && echo "promptfolio/promptfolio_ref.py --repo $PROMPTFOLIO_REPO" ;;
	cocoop) [ -n "${COOP_REPO:-}" ] && echo "cocoop/cocoop_ref.py --repo $COOP_REPO" ;;
	kgcoop) [ -n "${KGCOOP_REPO:-}" ] && echo "kgcoop/kgcoop_ref.py --repo $KGCOOP_REPO" ;;
	maple) [ -n "${MAPLE_REPO:-}" ] && echo "maple/maple_ref.py --repo $MAPLE_REPO" ;;
	fedpha) [ -n "${PMFLT_REPO:-}" ] && echo "fedpha/fedpha_ref.py --repo $PMFLT_REPO" ;;
	fedclip) [ -n "${PMFLT_REPO:-}" ] && echo "fedclip/fedclip_ref.py --repo $PMFLT_REPO" ;;
	dpfpl) [ -n "${DPFPL_REPO:-}" ] && echo "dpfpl/dpfpl_ref.py --repo $DPFPL_REPO" ;;
	fedmvp) [ -n "${FEDMVP_REPO:-}" ] && echo "fedmvp/fedmvp_ref.py --repo $FEDMVP_REPO" ;;
	*) echo "sitting_all: no reference harness for method $1" >&2; return 1 ;;
	esac
	return 0
}

for m in $methods; do
	h=$(harness "$m") || exit 2
	if [ -z "$h" ]; then
		echo "== $m: skipped (its checkout is not given; see the header of this script)"
		continue
	fi
	echo "== $m: reference ($h, $steps steps each)"
	load
	# shellcheck disable=SC2086 # h holds the script and its arguments
	if ! $py "$here/reference/"$h --steps "$steps" ${REF_ARGS:-} >"$out/$m-ref.json" 2>"$out/$m-ref.log"; then
		echo "reference failed: see $out/$m-ref.log"
		tail -n 5 "$out/$m-ref.log"
		continue
	fi
	cat "$out/$m-ref.json"
	load
	# fp32 on the cached production path; fp32 and bf16 uncached (the frozen
	# records recomputed every step, like for like with the authors' code)
	for run in fp32 fp32-uncached bf16-uncached; do
		prec=${run%%-*}
		flags=
		[ "$run" != "$prec" ] && flags=--uncached
		[ "$m" = fedmvp ] && flags="$flags --vocab ${CLIP_VOCAB:-$here/../shared/clip-vocab/bpe_simple_vocab_16e6.txt.gz}"
		echo "== $m: pfedmma bench train --method $m --precision $prec $flags"
		load
		# shellcheck disable=SC2086 # flags and BENCH_ARGS hold several flags
		if ! "$PFEDMMA" bench train --method "$m" --steps "$steps" --precision "$prec" $flags --reference "$out/$m-ref.json" --json ${BENCH_ARGS:-} \
			>"$out/$m-$run.json" 2>"$out/$m-$run.log"; then
			echo "pfedmma $run: not run ($(tail -n 1 "$out/$m-$run.log"))"
			rm -f "$out/$m-$run.json"
		else
			cat "$out/$m-$run.json"
		fi
		load
	done
done

# the table, from the JSON files
$py - "$out" $methods >"$out/table.md" <<'PY'
import json, os, sys
out, methods = sys.argv[1], sys.argv[2:]
print("CPU (both sides): " + open(os.path.join(out, "cpu.txt")).read().strip() + "\n")
def read(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
def f(x):
    return f"{x:.2f}" if x else "—"
runs = [("fp32", "fp32 cached"), ("fp32-uncached", "fp32 uncached (like for like)"), ("bf16-uncached", "bf16 uncached")]
print("| method | reference train / eval images/s | " + " | ".join(f"pfedmma {t} train / eval images/s | ratio" for _, t in runs) + " | kernel | pfedmma caches |")
print("|---|---|" + "---|---|" * len(runs) + "---|---|")
conf = set()
for m in methods:
    ref = read(f"{m}-ref.json")
    if ref is None:
        print(f"| {m} | not run |" + " |" * (2 * len(runs) + 2))
        continue
    conf.add(ref.get("config", "?"))
    row = [m, f"{f(ref['train_images_per_s'])} / {f(ref['eval_images_per_s'])}"]
    kernel, cached = "—", "—"
    for run, _ in runs:
        r = read(f"{m}-{run}.json")
        if r is None:
            row += ["not run", "—"]
            continue
        row.append(f"{f(r['train_images_per_s'])} ±{100 * r['train_spread']:.0f}% / {f(r['eval_images_per_s'])} ±{100 * r['eval_spread']:.0f}%")
        row.append(f"**{r['speedup_train']:.1f}×** / **{r['speedup_eval']:.1f}×**")
        if run == "fp32":
            kernel = f"{r['backend']} {r['kernel']} ({r['threads']} threads)"
            cached = r.get("cached", "—")
    row += [kernel, cached]
    print("| " + " | ".join(row) + " |")
print()
for c in sorted(conf):
    print(f"Reference configuration: {c}.")
PY
echo
cat "$out/table.md"
echo
echo "sitting took $(($(date +%s) - start)) s; files in $out"

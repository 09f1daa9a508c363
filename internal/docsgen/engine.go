package docsgen

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The engine benchmark's evidence (README "## Performance"): `pfedmma bench
// train` and `pfedmma bench experiment` in fp32 and bf16 and the authors'
// run they divide by, all from sitting (3).
const (
	engineRef  = "sitting/3/pfedmma-ref.json"
	engineFP32 = "sitting/3/train-fp32.json"
	engineBF16 = "sitting/3/train-bf16.json"
	roundFP32  = "sitting/3/exp-fp32.json"
	roundBF16  = "sitting/3/exp-bf16.json"
)

func readNumbers(docsDir, rel string, keys ...string) (map[string]float64, error) {
	path := filepath.Join(docsDir, rel)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j map[string]any
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]float64, len(keys))
	for _, k := range keys {
		x, ok := j[k].(float64)
		if !ok || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return nil, fmt.Errorf("%s: key %s is missing or not a non-negative number", path, k)
		}
		out[k] = x
	}
	return out, nil
}

var engineKeys = []string{"train_images_per_s_online", "eval_images_per_s_online", "train_images_per_s_cached", "eval_images_per_s_cached",
	"train_online_spread", "eval_online_spread", "train_cached_spread", "eval_cached_spread", "gemm_gflops", "peak_rss_mib",
	"reference_train_images_per_s", "reference_eval_images_per_s"}

func engineBlocks(docsDir string) ([]Block, error) {
	ref, err := readNumbers(docsDir, engineRef, "train_images_per_s", "eval_images_per_s", "peak_rss_mib")
	if err != nil {
		return nil, fmt.Errorf("engine table: %w", err)
	}
	var runs [2]map[string]float64
	for i, rel := range []string{engineFP32, engineBF16} {
		if runs[i], err = readNumbers(docsDir, rel, engineKeys...); err != nil {
			return nil, fmt.Errorf("engine table: %w", err)
		}
		if runs[i]["reference_train_images_per_s"] != ref["train_images_per_s"] || runs[i]["reference_eval_images_per_s"] != ref["eval_images_per_s"] {
			return nil, fmt.Errorf("engine table: docs/%s was divided by another reference than docs/%s", rel, engineRef)
		}
	}
	rate := func(r map[string]float64, what, kind string) string {
		v := r[what+"_images_per_s_"+kind]
		return fmt.Sprintf("%.2f images/s ±%.0f%% (**%.1f×**)", v, 100*r[what+"_"+kind+"_spread"], round1(v/ref[what+"_images_per_s"]))
	}
	ratio := func(r map[string]float64, what, kind string) float64 {
		return round1(r[what+"_images_per_s_"+kind] / ref[what+"_images_per_s"])
	}
	fp, bf := runs[0], runs[1]
	var b strings.Builder
	b.WriteString("\n| `pfedmma bench train` (pFedMMA, blocks 10–12, r 32; both sides sitting 3) | fp32 (exact) | `--precision bf16` | reference |\n|---|---|---|---|\n")
	for _, row := range []struct{ label, what, kind string }{
		{"training, online augmentation (like for like)", "train", "online"},
		{"evaluation without cache (like for like)", "eval", "online"},
		{"*what pfedmma adds:* training, cached records", "train", "cached"},
		{"*what pfedmma adds:* evaluation, cached records", "eval", "cached"},
	} {
		fmt.Fprintf(&b, "| %s | %s | %s | %.3f images/s |\n", row.label, rate(fp, row.what, row.kind), rate(bf, row.what, row.kind), ref[row.what+"_images_per_s"])
	}
	fmt.Fprintf(&b, "| GEMM inside a cached training step | %.0f GFLOP/s | %.0f GFLOP/s | |\n", fp["gemm_gflops"], bf["gemm_gflops"])
	fmt.Fprintf(&b, "| peak RSS | %.0f MiB | %.0f MiB | %.0f MiB |\n", fp["peak_rss_mib"], bf["peak_rss_mib"], ref["peak_rss_mib"])
	src := "docs/" + engineFP32 + ", docs/" + engineBF16 + " and docs/" + engineRef
	holds := func(tr, ev float64) string {
		if tr >= 6 && ev >= 10 {
			return "hold"
		}
		return "do not hold"
	}
	hf, hb := holds(ratio(fp, "train", "cached"), ratio(fp, "eval", "cached")), holds(ratio(bf, "train", "cached"), ratio(bf, "eval", "cached"))
	verdict := "the 6× / 10× targets " + hf
	if hf != hb {
		verdict += " in fp32 and " + hb + " in bf16"
	}
	headline := fmt.Sprintf("On the production path pFedMMA's step is **%.1f× the authors' training and %.1f× their evaluation in exact fp32, %.1f× / %.1f× in bf16**: %s.",
		ratio(fp, "train", "cached"), ratio(fp, "eval", "cached"), ratio(bf, "train", "cached"), ratio(bf, "eval", "cached"), verdict)
	like := fmt.Sprintf("Like for like (every image through the whole encoder at every step), pfedmma is %.1f× / %.1f× in fp32 and %.1f× / %.1f× in bf16",
		ratio(fp, "train", "online"), ratio(fp, "eval", "online"), ratio(bf, "train", "online"), ratio(bf, "eval", "online"))
	blocks := []Block{
		{Name: "engine-table", Source: src, Body: b.String()},
		{Name: "engine-headline", Source: src, Body: headline},
		{Name: "engine-like-for-like", Source: src, Body: like},
	}
	round, err := roundBlock(docsDir)
	if err != nil {
		return nil, err
	}
	return append(blocks, round), nil
}

var roundKeys = []string{"seconds_per_round", "train_seconds_per_round", "eval_seconds_per_round", "reference_seconds_per_round",
	"speedup_per_round", "cache_fill_seconds", "gflop_per_round", "projected_50_rounds_seconds"}

func roundBlock(docsDir string) (Block, error) {
	var runs [2]map[string]float64
	for i, rel := range []string{roundFP32, roundBF16} {
		var err error
		if runs[i], err = readNumbers(docsDir, rel, roundKeys...); err != nil {
			return Block{}, fmt.Errorf("round table: %w", err)
		}
	}
	fp, bf := runs[0], runs[1]
	if math.Abs(fp["reference_seconds_per_round"]-bf["reference_seconds_per_round"]) > 1e-9 {
		return Block{}, fmt.Errorf("round table: docs/%s and docs/%s divide by different references", roundFP32, roundBF16)
	}
	ratio := func(r map[string]float64) float64 {
		return round1(r["reference_seconds_per_round"] / r["seconds_per_round"])
	}
	var b strings.Builder
	b.WriteString("\n| `pfedmma bench experiment --rounds 3` | fp32 (exact) | `--precision bf16` |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| seconds per round (median of rounds 1–2: training + evaluation) | %.1f (%.1f + %.1f) | %.1f (%.1f + %.1f) |\n",
		fp["seconds_per_round"], fp["train_seconds_per_round"], fp["eval_seconds_per_round"],
		bf["seconds_per_round"], bf["train_seconds_per_round"], bf["eval_seconds_per_round"])
	fmt.Fprintf(&b, "| **against the authors' %s s per round** | **%.1f×** | **%.1f×** |\n", thousands(fp["reference_seconds_per_round"]), ratio(fp), ratio(bf))
	fmt.Fprintf(&b, "| cache fill (first round only) | %.0f s | %.0f s |\n", fp["cache_fill_seconds"], bf["cache_fill_seconds"])
	fmt.Fprintf(&b, "| GEMM per round | %.1f TFLOP | %.1f TFLOP |\n", fp["gflop_per_round"]/1000, bf["gflop_per_round"]/1000)
	fmt.Fprintf(&b, "| 50 rounds, projected | %.2f h | %.2f h |\n", fp["projected_50_rounds_seconds"]/3600, bf["projected_50_rounds_seconds"]/3600)
	return Block{Name: "round-table", Source: "docs/" + roundFP32 + " and docs/" + roundBF16, Body: b.String()}, nil
}

// thousands writes a whole number with comma separators (1037.3 → "1,037").
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

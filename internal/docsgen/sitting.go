package docsgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SittingManifest names the evidence of the table "Every method against its
// authors' code" (docs/sitting/table.json).
const SittingManifest = "sitting/table.json"

// sittingRow is one method's row of the manifest: paths are relative to
// docs/sitting/, whose first folder is the sitting the run belongs to.
type sittingRow struct {
	Method   string `json:"method"`
	Ref      string `json:"ref"`
	Cached   side   `json:"cached"`
	Uncached side   `json:"uncached"`
	BF16     side   `json:"bf16"`
	Caches   string `json:"caches"`
	Features bool   `json:"features"`
}

// side names one pfedmma run: the file, and which of its rates to read
// ("" for `bench train --method` output, "online" or "cached" for the engine
// benchmark's `bench train`).
type side struct {
	File  string `json:"file"`
	Rates string `json:"rates"`
}

// Run is one measured run read from its JSON: the rates in images/s, the
// sitting (the folder under docs/sitting/) and the batch.
type Run struct {
	File        string
	Sitting     string
	Train, Eval float64
	Batch       int
}

// Ratio is a pfedmma run divided by the authors' run it is compared with.
type Ratio struct {
	Ours, Ref   Run
	Train, Eval float64 // rounded to one decimal, as the table prints them
}

// SittingRow is one rendered row.
type SittingRow struct {
	Method                 string
	Ref                    Run
	Cached, Uncached, BF16 Ratio
	Caches                 string
	Features               bool
}

// SittingTable is the whole table, read and checked.
type SittingTable struct{ Rows []SittingRow }

// LoadSittingTable reads docs/sitting/table.json and every file it names,
// and checks each pairing: a pfedmma run must have been divided by exactly
// the reference figures of the authors' file its row names (same batch),
// and a reference file must not be a copy of an earlier sitting's (a reused
// reference is named by the sitting it was measured in).
func LoadSittingTable(docsDir string) (*SittingTable, error) {
	mpath := filepath.Join(docsDir, SittingManifest)
	data, err := os.ReadFile(mpath)
	if err != nil {
		return nil, fmt.Errorf("sitting table: %w", err)
	}
	var m struct {
		Rows []sittingRow `json:"rows"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", mpath, err)
	}
	if len(m.Rows) == 0 {
		return nil, fmt.Errorf("%s: no rows", mpath)
	}
	root := filepath.Join(docsDir, "sitting")
	tab := &SittingTable{}
	for i, r := range m.Rows {
		row, err := loadRow(root, r)
		if err != nil {
			return nil, fmt.Errorf("%s: rows[%d] (%s): %w", mpath, i, r.Method, err)
		}
		tab.Rows = append(tab.Rows, row)
	}
	return tab, nil
}

func loadRow(root string, r sittingRow) (SittingRow, error) {
	if r.Method == "" {
		return SittingRow{}, fmt.Errorf("field method is empty")
	}
	if err := checkNotReused(root, r.Ref); err != nil {
		return SittingRow{}, fmt.Errorf("field ref: %w", err)
	}
	ref, _, err := readRun(root, r.Ref, "", r.Method)
	if err != nil {
		return SittingRow{}, fmt.Errorf("field ref: %w", err)
	}
	row := SittingRow{Method: r.Method, Ref: ref, Caches: r.Caches, Features: r.Features}
	for _, c := range []struct {
		name string
		s    side
		dst  *Ratio
	}{{"cached", r.Cached, &row.Cached}, {"uncached", r.Uncached, &row.Uncached}, {"bf16", r.BF16, &row.BF16}} {
		if *c.dst, err = ratio(root, c.s, ref, r.Method); err != nil {
			return SittingRow{}, fmt.Errorf("field %s: %w", c.name, err)
		}
	}
	return row, nil
}

// checkNotReused refuses a reference file that is byte-identical to the
// same-named file of an earlier sitting: the sitting scripts copy a
// reference they reuse, and the row must name the sitting it ran in.
func checkNotReused(root, rel string) error {
	sit, name, err := splitSitting(rel)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(sit)
	if err != nil {
		return fmt.Errorf("%s: sitting folder %q is not a number", rel, sit)
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	for k := 1; k < n; k++ {
		earlier := filepath.Join(strconv.Itoa(k), name)
		other, err := os.ReadFile(filepath.Join(root, earlier))
		if err == nil && bytes.Equal(other, data) {
			return fmt.Errorf("%s is a copy of %s (a reused reference): name %s", rel, earlier, earlier)
		}
	}
	return nil
}

func splitSitting(rel string) (sitting, name string, err error) {
	sitting, name, ok := strings.Cut(filepath.ToSlash(rel), "/")
	if !ok || sitting == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q is not SITTING/FILE.json", rel)
	}
	return sitting, name, nil
}

// readRun reads one run's rates; rates selects the engine benchmark's
// suffixed keys. The reference figures the run was divided by are returned
// too (zero for an authors' file).
func readRun(root, rel, rates, method string) (Run, [2]float64, error) {
	var refRates [2]float64
	sit, _, err := splitSitting(rel)
	if err != nil {
		return Run{}, refRates, err
	}
	path := filepath.Join(root, rel)
	data, err := os.ReadFile(path)
	if err != nil {
		return Run{}, refRates, err
	}
	var j map[string]any
	if err := json.Unmarshal(data, &j); err != nil {
		return Run{}, refRates, fmt.Errorf("%s: %w", path, err)
	}
	if got, ok := j["method"].(string); ok && got != method {
		return Run{}, refRates, fmt.Errorf("%s: method is %q, the row is %q", path, got, method)
	}
	suffix := ""
	switch rates {
	case "":
	case "online", "cached":
		suffix = "_" + rates
	default:
		return Run{}, refRates, fmt.Errorf("rates %q: want \"\", \"online\" or \"cached\"", rates)
	}
	run := Run{File: rel, Sitting: sit}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"train_images_per_s" + suffix, &run.Train}, {"eval_images_per_s" + suffix, &run.Eval},
		{"reference_train_images_per_s", &refRates[0]}, {"reference_eval_images_per_s", &refRates[1]}} {
		v, ok := j[f.key]
		if !ok {
			continue
		}
		x, ok := v.(float64)
		if !ok || x < 0 || math.IsInf(x, 0) {
			return Run{}, refRates, fmt.Errorf("%s: key %s is not a non-negative number", path, f.key)
		}
		*f.dst = x
	}
	if run.Train <= 0 || run.Eval <= 0 {
		return Run{}, refRates, fmt.Errorf("%s: keys train_images_per_s%s and eval_images_per_s%s must be positive", path, suffix, suffix)
	}
	b, ok := j["batch"].(float64)
	if !ok || b <= 0 || b != math.Trunc(b) {
		return Run{}, refRates, fmt.Errorf("%s: key batch must be a positive integer", path)
	}
	run.Batch = int(b)
	return run, refRates, nil
}

func ratio(root string, s side, ref Run, method string) (Ratio, error) {
	ours, recorded, err := readRun(root, s.File, s.Rates, method)
	if err != nil {
		return Ratio{}, err
	}
	if recorded != [2]float64{ref.Train, ref.Eval} {
		return Ratio{}, fmt.Errorf("%s was divided by the reference %g / %g, not by %s's %g / %g",
			s.File, recorded[0], recorded[1], ref.File, ref.Train, ref.Eval)
	}
	if ours.Batch != ref.Batch {
		return Ratio{}, fmt.Errorf("%s ran at batch %d, %s at batch %d", s.File, ours.Batch, ref.File, ref.Batch)
	}
	return Ratio{Ours: ours, Ref: ref, Train: round1(ours.Train / ref.Train), Eval: round1(ours.Eval / ref.Eval)}, nil
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// runBlocks are single runs quoted in the README's prose, each with its
// ratio to the authors' run of its own sitting (SITTING/METHOD-ref.json).
var runBlocks = []string{"4/cocoop-bf16.json", "4/fedmvp-bf16.json", "1/pfedmma-fp32.json"}

// RunBlock renders one run as "train / eval images/s, **a×** / **b×** (sitting N vs N)";
// its block is named run-SITTING-STEM.
func RunBlock(docsDir, rel string) (Block, error) {
	root := filepath.Join(docsDir, "sitting")
	sit, name, err := splitSitting(rel)
	if err != nil {
		return Block{}, err
	}
	path := filepath.Join(root, rel)
	data, err := os.ReadFile(path)
	if err != nil {
		return Block{}, err
	}
	var head struct {
		Method string `json:"method"`
	}
	if err := json.Unmarshal(data, &head); err != nil || head.Method == "" {
		return Block{}, fmt.Errorf("%s: key method must name the method (%v)", path, err)
	}
	refRel := sit + "/" + head.Method + "-ref.json"
	if err := checkNotReused(root, refRel); err != nil {
		return Block{}, err
	}
	ref, _, err := readRun(root, refRel, "", head.Method)
	if err != nil {
		return Block{}, err
	}
	q, err := ratio(root, side{File: rel}, ref, head.Method)
	if err != nil {
		return Block{}, err
	}
	body := fmt.Sprintf("%.2f / %.2f images/s, **%.1f×** / **%.1f×** (sitting %s vs %s)", q.Ours.Train, q.Ours.Eval, q.Train, q.Eval, q.Ours.Sitting, q.Ref.Sitting)
	stem := strings.TrimSuffix(name, ".json")
	return Block{Name: "run-" + sit + "-" + stem, Source: "docs/sitting/" + rel + " and docs/sitting/" + refRel, Body: body}, nil
}

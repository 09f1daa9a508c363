package main

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
)

// deployDocs holds the README walkthrough's evidence: `pfedmma run
// --preset world-deploy` at its full length, plain, with secure
// aggregation and with int8 compression (docs/deploy/README.md).
const deployDocs = "../../docs/deploy"

// deployRuns are the evidence's runs and the --set each adds to the preset.
var deployRuns = []struct{ dir, set string }{
	{"plain", ""}, {"secagg", "federation.secure_aggregation=true"}, {"int8", "federation.compress=int8"},
}

// The bounds the README's walkthrough quotes, at its length (60 rounds):
// secure aggregation's global tensors against the plain run's, and int8's
// final metrics against float32's, in points.
const (
	deploySecAggBound = 1e-5
	deployInt8Bound   = 1.5
)

// deployComparison is docs/deploy/comparison.json: the numbers the README
// quotes, computed from the runs' files by TestWalkthroughEvidence.
type deployComparison struct {
	Rounds int `json:"rounds"`
	// First and Last are the plain run's mean metrics after round 0 and
	// after the last round.
	First map[string]float64 `json:"plain_first_round"`
	Last  map[string]float64 `json:"plain_last_round"`
	// SecAggGlobalMaxAbsDiff is the largest |Δ| over the global tensors'
	// values, secure aggregation against plain; SecAggMetricsMaxAbsDiff
	// the largest over the final metrics, in points.
	SecAggGlobalMaxAbsDiff  float64 `json:"secagg_global_max_abs_diff"`
	SecAggMetricsMaxAbsDiff float64 `json:"secagg_final_metrics_max_abs_diff_points"`
	// Int8MinusPlain is int8's final metrics less float32's, in points;
	// Int8MaxAbsDiff the largest in magnitude.
	Int8MinusPlain map[string]float64 `json:"int8_minus_plain_points"`
	Int8MaxAbsDiff float64            `json:"int8_max_abs_diff_points"`
}

// TestWalkthroughEvidence holds the README walkthrough's evidence to the
// walkthrough's job and its claims, without running it (a run takes
// minutes): every run in docs/deploy is of today's world-deploy preset (its
// fingerprint; a changed preset must be measured again), the plain run's
// Local and HM do not fall (the last round at least round 0's, and no round
// more than a point below the best before it), the bounds the README
// quotes hold, and docs/deploy/comparison.json holds the numbers computed
// here (PFEDMMA_WRITE_DEPLOY_EVIDENCE=1 writes it).
func TestWalkthroughEvidence(t *testing.T) {
	for _, r := range deployRuns {
		x := experimentFlags{preset: "world-deploy"}
		if r.set != "" {
			x.sets = []string{r.set}
		}
		e, _, err := x.compose()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(deployDocs, r.dir, "fingerprint.txt")
		if got := strings.TrimSpace(readFileString(t, path)); got != e.Fingerprint() {
			t.Errorf("%s: fingerprint %s, but world-deploy (--set %q) is %s today: measure it again (docs/deploy/README.md)", path, got, r.set, e.Fingerprint())
		}
	}
	plain := readRoundMeans(t, filepath.Join(deployDocs, "plain"))
	for _, m := range []string{"local", "hm"} {
		best := math.Inf(-1)
		for _, r := range plain {
			if v := r.Mean[m]; v < best-1 {
				t.Errorf("plain %s falls: %.2f after round %d, %.2f before", m, v, r.Round, best)
			}
			best = max(best, r.Mean[m])
		}
		if first, last := plain[0].Mean[m], plain[len(plain)-1].Mean[m]; last < first {
			t.Errorf("plain %s ends at %.2f, below round 0's %.2f", m, last, first)
		}
	}
	// the walkthrough as written (serve and three sites, serve/walkthrough.sh)
	// ended as the in-process run, and its sites, started again, exited 0
	if a, b := deployFinal(t, "serve"), deployFinal(t, "plain"); !maps.Equal(a, b) || len(a) != 4 {
		t.Errorf("serve's final metrics %v, the in-process run's %v", a, b)
	}
	if a, b := readFileString(t, filepath.Join(deployDocs, "serve", "global", "pfedmma.safetensors")), readFileString(t, filepath.Join(deployDocs, "plain", "global", "pfedmma.safetensors")); a != b {
		t.Errorf("serve's global tensors differ from the in-process run's")
	}
	if again := readFileString(t, filepath.Join(deployDocs, "serve", "again.txt")); strings.Count(again, ": exit 0") != 3 {
		t.Errorf("the sites started again after the end: %s", again)
	}
	got := compareDeploy(t, plain)
	if got.SecAggGlobalMaxAbsDiff > deploySecAggBound || got.Int8MaxAbsDiff > deployInt8Bound {
		t.Errorf("secure aggregation within %g (bound %g), int8 within %.2f points (bound %g)", got.SecAggGlobalMaxAbsDiff, deploySecAggBound, got.Int8MaxAbsDiff, deployInt8Bound)
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(deployDocs, "comparison.json")
	if os.Getenv("PFEDMMA_WRITE_DEPLOY_EVIDENCE") == "1" {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if have := readFileString(t, path); have != string(b)+"\n" {
		t.Errorf("%s differs from the runs' numbers (PFEDMMA_WRITE_DEPLOY_EVIDENCE=1 rewrites it):\n%s\nwant\n%s", path, have, b)
	}
}

// compareDeploy computes the comparison of docs/deploy's runs.
func compareDeploy(t *testing.T, plain []opsMeans) deployComparison {
	t.Helper()
	c := deployComparison{Rounds: len(plain), First: plain[0].Mean, Last: plain[len(plain)-1].Mean, Int8MinusPlain: map[string]float64{}}
	fp, sa, q := deployFinal(t, "plain"), deployFinal(t, "secagg"), deployFinal(t, "int8")
	for _, m := range []string{"local", "base", "novel", "hm"} {
		c.SecAggMetricsMaxAbsDiff = max(c.SecAggMetricsMaxAbsDiff, math.Abs(sa[m]-fp[m]))
		d := math.Round((q[m]-fp[m])*1e4) / 1e4
		c.Int8MinusPlain[m] = d
		c.Int8MaxAbsDiff = max(c.Int8MaxAbsDiff, math.Abs(d))
	}
	g, gs := deployGlobal(t, "plain"), deployGlobal(t, "secagg")
	for name, v := range g {
		w, ok := gs[name]
		if !ok || len(w) != len(v) {
			t.Fatalf("secagg's global %s: %d values, plain's %d", name, len(w), len(v))
		}
		for i := range v {
			c.SecAggGlobalMaxAbsDiff = max(c.SecAggGlobalMaxAbsDiff, math.Abs(float64(w[i])-float64(v[i])))
		}
	}
	if len(g) == 0 || len(g) != len(gs) {
		t.Fatalf("global tensors: plain %v, secagg %v", slices.Sorted(maps.Keys(g)), slices.Sorted(maps.Keys(gs)))
	}
	return c
}

// deployFinal reads the final metrics of docs/deploy's run dir.
func deployFinal(t *testing.T, dir string) map[string]float64 {
	t.Helper()
	var s struct {
		Methods map[string]map[string]float64 `json:"methods"`
	}
	if err := json.Unmarshal([]byte(readFileString(t, filepath.Join(deployDocs, dir, "summary.json"))), &s); err != nil {
		t.Fatal(err)
	}
	return s.Methods["pfedmma"]
}

// deployGlobal reads the global tensors of docs/deploy's run dir.
func deployGlobal(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(deployDocs, dir, "global", "pfedmma.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := f.Float32All()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for k, v := range all {
		out[k] = v.Data
	}
	return out
}

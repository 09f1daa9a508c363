package deploy

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/runfiles"
	"github.com/pfedmma/pfedmma/tensor"
)

// countingProxy is a client that trains nothing and records the rounds it
// is evaluated after.
type countingProxy struct {
	id    int
	mu    *sync.Mutex
	evals *[]int
}

func (p countingProxy) ID() int          { return p.id }
func (p countingProxy) NumExamples() int { return 1 }
func (p countingProxy) Fit(_ context.Context, ins federation.FitIns) (federation.FitRes, error) {
	return federation.FitRes{Params: ins.Params, NumExamples: 1}, nil
}
func (p countingProxy) Evaluate(_ context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id == 0 {
		*p.evals = append(*p.evals, ins.Round)
	}
	return federation.EvaluateRes{Metrics: map[string]float64{"acc": 1}}, nil
}

// tinyConfig is the default job shrunk to a few seconds on a small model.
func tinyConfig(t *testing.T, sets ...string) *config.Experiment {
	t.Helper()
	e, err := config.Compose(config.Sources{Preset: config.DefaultPreset, Sets: append([]string{
		"methods=[pfedmma]", "dataset.num_classes=8", "federation.clients=2", "federation.fraction=1",
		"pfedmma.dim=8", "output.plots=false"}, sets...)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestServeEvaluatesAsRun (issues 17 and 20): `serve`'s coordinator
// evaluates after exactly the rounds `run` records — federation.eval_every
// 0 the last round only, k every k-th round and the last, 1 every round.
func TestServeEvaluatesAsRun(t *testing.T) {
	model := smallModel(t)
	for _, tc := range []struct {
		every string
		want  []int
	}{{"0", []int{3}}, {"3", []int{2, 3}}, {"1", []int{0, 1, 2, 3}}} {
		e := tinyConfig(t, "federation.rounds=4", "federation.eval_every="+tc.every)
		o, err := experiment.FromConfig(e, model, e.Seed, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		res, err := experiment.Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		var ran []int
		for _, r := range res.Records {
			ran = append(ran, r.Round)
		}
		var mu sync.Mutex
		var served []int
		co := serveCoordinator(o, &strategy.FedAvg{Initial: tensor.Named{"w": tensor.New(2)}}, 2, 1, time.Minute, "fp")
		co.Logger = slog.New(slog.DiscardHandler)
		co.Proxies = []federation.ClientProxy{countingProxy{0, &mu, &served}, countingProxy{1, &mu, &served}}
		if _, err := co.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(served, ran) || !slices.Equal(ran, tc.want) {
			t.Errorf("eval_every %s: serve evaluates after rounds %v, run after %v; want %v", tc.every, served, ran, tc.want)
		}
	}
}

// TestFederationWritesRunFiles (issue 20): the same job writes the same
// files whether simulated or federated — the coordinator's output folder
// holds run's global/<method>.safetensors, run.json and config.yaml, each
// site's state folder run's sites/<method>/client_NNN.safetensors — with
// the same bytes, and the bytes per site are counted alike.
func TestFederationWritesRunFiles(t *testing.T) {
	model := smallModel(t)
	e := tinyConfig(t, "federation.rounds=2", "federation.eval_every=1")
	sim, err := experiment.FromConfig(e, model, e.Seed, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want, err := experiment.Run(context.Background(), sim)
	if err != nil {
		t.Fatal(err)
	}
	o := sim
	o.OutDir = t.TempDir()
	coord, err := experiment.PrepareFederated(context.Background(), o, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	co := serveCoordinator(o, coord.Plan.Strategy, 2, 2, time.Minute, e.Fingerprint())
	co.Logger = slog.New(slog.DiscardHandler)
	var sites []*experiment.Federated
	for i := range 2 {
		s, err := experiment.PrepareFederated(context.Background(), o, i)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sites = append(sites, s)
		co.Proxies = append(co.Proxies, federation.NewSite(s.Client(i), filepath.Join(t.TempDir(), "state")))
	}
	hist, err := co.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, err := experiment.WriteFederationReports(o, coord, hist)
	if err != nil {
		t.Fatal(err)
	}
	siteDir := t.TempDir()
	for i, s := range sites {
		if err := s.WriteSite(siteDir, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{runfiles.GlobalFile("pfedmma"), filepath.Join(runfiles.SitesFolder("pfedmma"), runfiles.SiteFile(0)), filepath.Join(runfiles.SitesFolder("pfedmma"), runfiles.SiteFile(1))} {
		a, err := os.ReadFile(filepath.Join(sim.OutDir, f))
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		dir := o.OutDir
		if filepath.Dir(f) != runfiles.GlobalDir {
			dir = siteDir
		}
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("serve + sites: %v", err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between run and serve + sites", f)
		}
	}
	for _, f := range []string{runfiles.InfoFile, "config.yaml", "summary.json", "metrics.jsonl", "report.md"} {
		if _, err := os.Stat(filepath.Join(o.OutDir, f)); err != nil {
			t.Errorf("serve wrote no %s: %v", f, err)
		}
	}
	if a, b := runFiles(t, sim.OutDir, "checkpoints", runfiles.SitesDir, ".pfedmma"), runFiles(t, o.OutDir); !slices.Equal(a, b) {
		t.Errorf("run wrote %v, serve %v", a, b)
	}
	for _, k := range []string{"update_bytes_per_round_per_site", "download_bytes_per_round_per_site"} {
		w, g := want.Summary.Extra[k].(map[string]float64), got.Summary.Extra[k].(map[string]float64)
		if w["pfedmma"] <= 0 || w["pfedmma"] != g["pfedmma"] {
			t.Errorf("%s: run %v, serve %v", k, w, g)
		}
	}
	if want.Table.Text() != got.Table.Text() {
		t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", want.Table.Text(), got.Table.Text())
	}
}

// runFiles lists the files under dir (relative paths), leaving out those
// under the skipped top-level names.
func runFiles(t *testing.T, dir string, skip ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range skip {
			if rel == s || len(rel) > len(s) && rel[:len(s)] == s {
				return nil
			}
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

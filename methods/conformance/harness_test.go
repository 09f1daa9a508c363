package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/runfiles"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"

	_ "github.com/pfedmma/pfedmma/methods/all" // every method
	_ "github.com/pfedmma/pfedmma/world"       // the generated world
)

// The tiny world of the suite.
const (
	numClients = 3
	numRounds  = 3
)

// trainable lists the registered methods that train (Depth is not
// AnyDepth), in registration order.
func trainable(t *testing.T) []methods.Method {
	t.Helper()
	var out []methods.Method
	for _, m := range methods.All() {
		sec := m.DefaultConfig()
		d, err := m.Depth(sec, 2)
		if err != nil || d != methods.AnyDepth {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		t.Fatal("no trainable method registered")
	}
	return out
}

var (
	modelOnce sync.Once
	modelDir  string
	modelErr  error
)

// model is the embedded CLIP's folder.
func model(t *testing.T) string {
	t.Helper()
	modelOnce.Do(func() { modelDir, modelErr = assets.DefaultModelDir() })
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return modelDir
}

// worldConfig is the tiny world run of method name: 3 clients, 6 classes
// (base-to-novel), 2 shots, 3 rounds of one local epoch, fraction 0.5
// (every client in round 0, two of three later: one idle per round),
// evaluation after every round in batches of one (the batch `pfedmma
// predict` scores), the method's SmallRun overrides, then sets.
func worldConfig(t *testing.T, name string, sets ...string) *config.Experiment {
	t.Helper()
	e, err := worldConfigErr(t, name, sets...)
	if err != nil {
		t.Fatalf("%s: the tiny world run is not a valid configuration (declare overrides with methods.SmallRun): %v", name, err)
	}
	return e
}

// worldConfigErr is worldConfig, returning the configuration's error.
func worldConfigErr(t *testing.T, name string, sets ...string) (*config.Experiment, error) {
	t.Helper()
	return worldConfigN(t, name, numClients, sets...)
}

// worldConfigN is worldConfigErr with another number of clients.
func worldConfigN(t *testing.T, name string, clients int, sets ...string) (*config.Experiment, error) {
	t.Helper()
	e, err := config.Preset("world-compare")
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"methods=[" + name + "]", "dataset.num_classes=6", "dataset.shots=2",
		fmt.Sprintf("federation.clients=%d", clients), fmt.Sprintf("federation.rounds=%d", numRounds),
		"federation.local_epochs=1", "federation.fraction=0.5", "federation.eval_every=1", "batch_size=4",
		"eval.batch_size=1", "output.plots=false", "output.save_adapters=true"}
	m, err := methods.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	if sr, ok := m.(methods.SmallRun); ok {
		over := sr.SmallSettings(clients)
		for _, k := range slices.Sorted(maps.Keys(over)) {
			base = append(base, name+"."+k+"="+over[k])
		}
	}
	for _, kv := range append(base, sets...) {
		path, value, err := config.ParseSet(kv)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Set(path, value); err != nil {
			return nil, fmt.Errorf("--set %s: %w", kv, err)
		}
	}
	return e, e.Validate()
}

// options resolves e into a run's options writing to out.
func options(t *testing.T, e *config.Experiment, out string) experiment.Options {
	t.Helper()
	o, err := experiment.FromConfig(e, model(t), e.Seed, out)
	if err != nil {
		t.Fatal(err)
	}
	// two test images per class (the world's default is 16)
	o.DatasetOptions.TestPerClass = 2
	return o
}

// evalLogits keeps, per client, the logits of each evaluation set of the
// client's latest evaluation.
type evalLogits struct {
	mu  sync.Mutex
	by  map[int][][]float32
	set map[int]*protocol.ClientTask
}

func newEvalLogits() *evalLogits {
	return &evalLogits{by: map[int][][]float32{}, set: map[int]*protocol.ClientTask{}}
}

func (e *evalLogits) record(_ string, c *protocol.ClientTask, logits [][]float32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cp := make([][]float32, len(logits))
	for i, l := range logits {
		cp[i] = slices.Clone(l)
	}
	e.by[c.ID], e.set[c.ID] = cp, c
}

// outcome is what a run leaves: the server's global tensors, each site's
// kept tensors (for predict) and newest saved client state, every
// evaluated round's metrics and the summary's.
type outcome struct {
	global  tensor.Named
	sites   map[int]tensor.Named
	states  map[int]tensor.Named
	records []report.RoundRecord
	summary report.Metrics
}

// sitesDir is where a run folder keeps method name's site files.
func sitesDir(out, name string) string { return filepath.Join(out, runfiles.SitesFolder(name)) }

func readNamed(t *testing.T, path string) tensor.Named {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Float32All()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// newestState reads the newest client state saved in a site folder.
func newestState(t *testing.T, dir string) tensor.Named {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "round-") && strings.HasSuffix(e.Name(), ".safetensors") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s holds no saved state", dir)
	}
	sort.Strings(names)
	return readNamed(t, filepath.Join(dir, names[len(names)-1]))
}

// simulate runs `pfedmma run` (experiment.Run) of o, stopping after round
// stopAfter when it is ≥ 0 (as a killed run stops), and returns the result.
func simulate(t *testing.T, o experiment.Options, stopAfter int, logits *evalLogits) (*experiment.Result, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if stopAfter >= 0 {
		o.OnRound = func(_ string, r federation.RoundReport) {
			if r.Round == stopAfter {
				cancel()
			}
		}
	}
	if logits != nil {
		o.OnEvaluate = logits.record
	}
	return experiment.Run(ctx, o)
}

// simOutcome reads the outcome of a finished `pfedmma run` of method name.
func simOutcome(t *testing.T, o experiment.Options, name string, res *experiment.Result) outcome {
	t.Helper()
	oc := outcome{sites: map[int]tensor.Named{}, states: map[int]tensor.Named{}, records: res.Records}
	if m, ok := res.Summary.Get(name); ok {
		oc.summary = m
	} else {
		t.Fatalf("%s: no summary row", name)
	}
	dir := sitesDir(o.OutDir, name)
	if p := filepath.Join(o.OutDir, runfiles.GlobalFile(name)); fileExists(p) {
		oc.global = readNamed(t, p)
	}
	for id := range numClients {
		p := filepath.Join(dir, fmt.Sprintf("client_%03d.safetensors", id))
		if _, err := os.Stat(p); err == nil {
			oc.sites[id] = readNamed(t, p)
		}
		oc.states[id] = newestState(t, filepath.Join(o.OutDir, "checkpoints", name, fmt.Sprintf("site-%03d", id)))
	}
	return oc
}

// sameMetrics compares two metric maps exactly (NaN equals NaN).
func sameMetrics(a, b map[string]float64) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%v vs %v", a, b)
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || (v != w && !(math.IsNaN(v) && math.IsNaN(w))) {
			return fmt.Sprintf("%s = %v vs %v", k, v, w)
		}
	}
	return ""
}

// compare checks that got is want bit for bit; what names the variant.
func compare(t *testing.T, what string, want, got outcome) {
	t.Helper()
	if d := tensortest.BitsDiff(want.global, got.global); d != "" {
		t.Errorf("%s: global tensors differ: %s", what, d)
	}
	if len(want.sites) != len(got.sites) {
		t.Errorf("%s: %d sites kept tensors, want %d", what, len(got.sites), len(want.sites))
	}
	for id, w := range want.sites {
		if d := tensortest.BitsDiff(w, got.sites[id]); d != "" {
			t.Errorf("%s: site %d keeps other tensors: %s", what, id, d)
		}
	}
	for id, w := range want.states {
		if got.states[id] == nil {
			continue // a run that does not read client states back
		}
		if d := tensortest.BitsDiff(w, got.states[id]); d != "" {
			t.Errorf("%s: site %d's saved client state differs: %s", what, id, d)
		}
	}
	if len(want.records) != len(got.records) {
		t.Fatalf("%s: %d evaluated rounds, want %d", what, len(got.records), len(want.records))
	}
	for i, w := range want.records {
		g := got.records[i]
		if g.Round != w.Round || len(g.Clients) != len(w.Clients) {
			t.Fatalf("%s: round record %d: round %d with %d clients, want round %d with %d", what, i, g.Round, len(g.Clients), w.Round, len(w.Clients))
		}
		for j := range w.Clients {
			if d := sameMetrics(w.Clients[j].Metrics, g.Clients[j].Metrics); d != "" || w.Clients[j].ID != g.Clients[j].ID {
				t.Errorf("%s: round %d client %d metrics differ: %s", what, w.Round, w.Clients[j].ID, d)
			}
		}
	}
	if d := sameMetrics(want.summary, got.summary); d != "" {
		t.Errorf("%s: summary differs: %s", what, d)
	}
}

// reference is a method's uninterrupted simulation, run once per method
// and shared by the checks.
type reference struct {
	name   string
	o      experiment.Options
	res    *experiment.Result
	oc     outcome
	logits *evalLogits
}

var (
	refMu sync.Mutex
	refs  = map[string]*reference{}
)

// ref runs (once) the uninterrupted tiny world run of method name.
func ref(t *testing.T, name string) *reference {
	t.Helper()
	refMu.Lock()
	defer refMu.Unlock()
	if r, ok := refs[name]; ok {
		if r.res == nil {
			t.Fatalf("%s: the reference run failed earlier", name)
		}
		return r
	}
	r := &reference{name: name, logits: newEvalLogits()}
	refs[name] = r
	dir, err := os.MkdirTemp("", "conformance-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	r.o = options(t, worldConfig(t, name), dir)
	res, err := simulate(t, r.o, -1, r.logits)
	if err != nil {
		t.Fatalf("%s: the tiny world run: %v", name, err)
	}
	r.res = res
	r.oc = simOutcome(t, r.o, name, res)
	if len(res.Records) != numRounds {
		t.Fatalf("%s: %d evaluated rounds, want %d", name, len(res.Records), numRounds)
	}
	return r
}

// forEach runs check as a subtest for every trainable method.
func forEach(t *testing.T, check func(t *testing.T, name string)) {
	for _, m := range trainable(t) {
		name := m.Info().Name
		t.Run(name, func(t *testing.T) { check(t, name) })
	}
}

// TestMain removes the reference runs' folders.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, r := range refs {
		if r.o.OutDir != "" {
			os.RemoveAll(r.o.OutDir)
		}
	}
	os.Exit(code)
}

// quiet is a logger that drops everything.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// loadModel loads the run's CLIP as `pfedmma predict` does.
func loadModel(t *testing.T, o experiment.Options) (*clip.Model, *tokenizer.Tokenizer, error) {
	t.Helper()
	return experiment.LoadModel(o.ModelPath, o.VocabPath)
}

// skipPureGo skips a federation-level check in make test's pure-Go pass:
// that pass re-checks the engine's numerics (predict = evaluation bit for
// bit, the step contract) under the fallback GEMM; resume, network,
// privacy, aggregation, setting edges and the loader's partial last batch
// do not depend on the GEMM and run in the main pass, where they must pass.
func skipPureGo(t *testing.T) {
	t.Helper()
	if pureGo {
		t.Skip("-tags purego: the federation contracts run in the main (cgo) pass; this pass checks predict = evaluation and the step contract")
	}
}

// fileExists says whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

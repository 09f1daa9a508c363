package tune

import (
	"context"
	"errors"
	"fmt"
	"image"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	_ "github.com/pfedmma/pfedmma/methods/all" // every method
	_ "github.com/pfedmma/pfedmma/world"       // the generated world dataset
)

// testless is the world dataset with its test labels shuffled and test
// images that cannot be read: a tune that looked at a test image fails, one
// that read a test label scores differently.
const testless = "world_testless"

// errTestImage is what reading a test image of the testless world gives.
var errTestImage = errors.New("a test image was read")

type failingSource struct{}

func (failingSource) Load() (image.Image, error) { return nil, errTestImage }

func init() {
	if err := dataset.Register(testless, func(root string, o dataset.Options) (*dataset.Dataset, error) {
		ds, err := dataset.Load("world", "", o)
		if err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewPCG(99, 1))
		labels := make([]int, len(ds.Test))
		for i, it := range ds.Test {
			labels[i] = it.Label
		}
		rng.Shuffle(len(labels), func(i, j int) { labels[i], labels[j] = labels[j], labels[i] })
		test := make([]dataset.Item, len(ds.Test))
		for i, it := range ds.Test {
			test[i] = dataset.Item{Key: it.Key, Label: labels[i], Domain: it.Domain, Source: failingSource{}}
		}
		ds.Name, ds.Test = testless, test
		return ds, nil
	}); err != nil {
		panic(err)
	}
}

func embedded(t *testing.T) func(string) (string, error) {
	t.Helper()
	dir, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	return func(string) (string, error) { return dir, nil }
}

// small is the default job cut to two rounds of one epoch.
var small = []string{"federation.rounds=2", "federation.local_epochs=1"}

func baseOptions(t *testing.T, out string, sets ...string) Options {
	grid, err := ParseGrid([]string{"optimizer.lr=0.0005,0.05", "pfedmma.scale=0.01,0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return Options{Preset: "world-base2novel", Sets: append(slices.Clone(small), sets...), Method: "pfedmma",
		Grid: grid, Out: out, ResolveModel: embedded(t)}
}

// TestTuneReadsNoTestImage: tuning on the world whose test labels are
// shuffled and whose test images cannot be read gives every trial the same
// validation accuracy, bit for bit, and chooses the same settings as on the
// plain world; the search is not flat (the choice means something).
func TestTuneReadsNoTestImage(t *testing.T) {
	plain, err := Run(context.Background(), baseOptions(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	shuffled, err := Run(context.Background(), baseOptions(t, t.TempDir(), "dataset.name="+testless, "dataset.root=unused"))
	if err != nil {
		t.Fatalf("tuning read the test split: %v", err)
	}
	if len(plain.Trials) != 4 || len(shuffled.Trials) != 4 {
		t.Fatalf("%d and %d trials, want the 4 of the grid", len(plain.Trials), len(shuffled.Trials))
	}
	lo, hi := plain.Trials[0].Val, plain.Trials[0].Val
	for i, tr := range plain.Trials {
		if s := shuffled.Trials[i]; s.Val != tr.Val || !slices.Equal(s.PerSeed, tr.PerSeed) {
			t.Fatalf("trial %d (%s): validation %v with the test labels shuffled, %v without", i+1, label(tr.Settings), s.Val, tr.Val)
		}
		lo, hi = min(lo, tr.Val), max(hi, tr.Val)
	}
	if !slices.Equal(plain.Sets(), shuffled.Sets()) {
		t.Fatalf("chosen %v with the test labels shuffled, %v without", shuffled.Sets(), plain.Sets())
	}
	if hi-lo < 1 {
		t.Fatalf("every trial scores within %.2f points (%.2f … %.2f): the test cannot tell a choice", hi-lo, lo, hi)
	}
	if !plain.Plan.Defaulted || plain.Plan.Validation != DefaultValidation {
		t.Fatalf("plan %+v: want protocol.validation defaulted to %v", plain.Plan, DefaultValidation)
	}
	// the plain world, scored on its test images, still works (the failing
	// source is the testless world's only)
	for _, tr := range plain.Trials {
		if tr.Val <= 0 || tr.Val > 100 {
			t.Fatalf("trial %d: validation accuracy %v", tr.Index, tr.Val)
		}
	}
}

// TestTuneResume: a tune stopped after its first trial continues in the same
// folder without running that trial again, and ends with the trials, the
// choice and the files of an uninterrupted tune; another search in that
// folder is refused.
func TestTuneResume(t *testing.T) {
	whole, err := Run(context.Background(), baseOptions(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	o := baseOptions(t, out)
	var ran []int
	o.OnTrial = func(tr Trial) {
		ran = append(ran, tr.Index)
		cancel() // killed once the first trial is done
	}
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted tune: error %v, want context.Canceled", err)
	}
	if !slices.Equal(ran, []int{1}) {
		t.Fatalf("trials %v ran before the interruption, want [1]", ran)
	}
	first, err := os.Stat(filepath.Join(out, "trials", "001", trialDone))
	if err != nil {
		t.Fatal(err)
	}
	ran = nil
	o.OnTrial = func(tr Trial) { ran = append(ran, tr.Index) }
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []int{2, 3, 4}) || res.Reused != 1 {
		t.Fatalf("resumed tune ran trials %v (reused %d), want [2 3 4] (reused 1)", ran, res.Reused)
	}
	if again, err := os.Stat(filepath.Join(out, "trials", "001", trialDone)); err != nil || !again.ModTime().Equal(first.ModTime()) {
		t.Fatalf("trial 1's record was rewritten (%v)", err)
	}
	for i, tr := range whole.Trials {
		if r := res.Trials[i]; r.Val != tr.Val || !slices.Equal(r.Settings, tr.Settings) {
			t.Fatalf("trial %d: resumed %v %v, uninterrupted %v %v", i+1, r.Settings, r.Val, tr.Settings, tr.Val)
		}
	}
	if res.Best != whole.Best {
		t.Fatalf("resumed tune chose trial %d, uninterrupted %d", res.Best+1, whole.Best+1)
	}
	for _, f := range []string{TableFile, PlotFile, TrialsFile, ChosenYAML, ChosenSets} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s not written: %v", f, err)
		}
	}
	// the YAML fragment, on the base preset, gives the chosen settings
	frag, err := os.ReadFile(filepath.Join(out, ChosenYAML))
	if err != nil {
		t.Fatal(err)
	}
	e, err := config.Compose(config.Sources{Preset: "world-base2novel", File: ChosenYAML, Data: frag})
	if err != nil {
		t.Fatalf("%s does not load: %v\n%s", ChosenYAML, err, frag)
	}
	want := res.Chosen().Settings
	if got := fmt.Sprint(e.Optimizer.LR); got != want[0].Value {
		t.Fatalf("%s sets optimizer.lr %s, want %s:\n%s", ChosenYAML, got, want[0].Value, frag)
	}
	sets, err := os.ReadFile(filepath.Join(out, ChosenSets))
	if err != nil || !strings.Contains(string(sets), "--set "+want[1].Key+"="+want[1].Value) {
		t.Fatalf("%s: %q (%v), want --set %s=%s", ChosenSets, sets, err, want[1].Key, want[1].Value)
	}

	o.Grid = o.Grid[:1]
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), PlanFile) {
		t.Fatalf("another search in the same folder: error %v, want one naming %s", err, PlanFile)
	}
}

// TestTuneRefusals: flags that would tune on something else than the
// validation split, or that name no valid setting, are refused with the
// flag or key named.
func TestTuneRefusals(t *testing.T) {
	for _, spec := range [][]string{{"protocol.validation=0.1,0.2"}, {"eval.split=test"}, {"optimizer.lr"},
		{"optimizer.lr=0.1,0.1"}, {"optimizer.lr=0.1", "optimizer.lr=0.2"}, {"seed=1,2"}} {
		if _, err := ParseGrid(spec); err == nil || !strings.Contains(err.Error(), "--grid") {
			t.Errorf("--grid %v: error %v, want one naming --grid", spec, err)
		}
	}
	o := baseOptions(t, t.TempDir(), "protocol.validation=0")
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "protocol.validation") {
		t.Errorf("protocol.validation=0 set explicitly: error %v, want one naming it", err)
	}
	o = baseOptions(t, t.TempDir())
	o.Grid = []Param{{Key: "optimizer.lr", Values: []string{"0.1", "-1"}}}
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "optimizer.lr") {
		t.Errorf("a grid value that is not a valid setting: error %v, want one naming optimizer.lr", err)
	}
	o = baseOptions(t, t.TempDir())
	o.Method = "nope"
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "--method") {
		t.Errorf("unknown method: error %v, want one naming --method", err)
	}
}

// TestRandomTrials: --trials N draws N distinct grid points, reproducibly
// from --sample-seed, in grid order.
func TestRandomTrials(t *testing.T) {
	grid, err := ParseGrid([]string{"optimizer.lr=0.01,0.02,0.05", "federation.local_epochs=1,2,3", "methods=[a,b]"})
	if err == nil {
		t.Fatalf("methods accepted as a grid key: %v", grid)
	}
	grid, err = ParseGrid([]string{"optimizer.lr=0.01,0.02,0.05", "federation.local_epochs=1,2,3"})
	if err != nil {
		t.Fatal(err)
	}
	plans := make([]Plan, 2)
	for i := range plans {
		_, plans[i], err = planOf(Options{Preset: "world-base2novel", Method: "pfedmma", Grid: grid, Trials: 4, SampleSeed: 5})
		if err != nil {
			t.Fatal(err)
		}
	}
	all := gridPoints(grid)
	if len(all) != 9 || len(plans[0].Points) != 4 || fmt.Sprint(plans[0].Points) != fmt.Sprint(plans[1].Points) {
		t.Fatalf("grid of %d points; drew %v then %v, want the same 4", len(all), plans[0].Points, plans[1].Points)
	}
	last := -1
	for _, p := range plans[0].Points {
		k := slices.IndexFunc(all, func(q []Setting) bool { return slices.Equal(p, q) })
		if k <= last {
			t.Fatalf("drawn points %v are not distinct grid points in grid order", plans[0].Points)
		}
		last = k
	}
	if vs := splitValues("[a,b],c"); !slices.Equal(vs, []string{"[a,b]", "c"}) {
		t.Fatalf("splitValues: %q", vs)
	}
}

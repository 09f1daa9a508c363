package conformance

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"gopkg.in/yaml.v3"
)

// keyWhen gives, for a listed key that the fixtures' own settings leave
// unread (read only under another setting), the overrides under which it
// is read: with them the key must change something.
var keyWhen = map[string]map[string]map[string]string{
	"clip_lora":   {"seed": {"dropout": "0.5"}},      // dropout masks
	"pfedmoap":    {"seed": {"selection": "random"}}, // the random experts
	"fedot":       {"logit_scale": {"tau": ""}},      // τ = exp(logit_scale) without tau
	"promptfolio": {"frac": {"theta": ""}},           // θ from the code's frac without theta
	// momentum from a client's second SGD step on: the fixtures' rounds
	// take one step per client (or AdamW)
	"adapt":  {"momentum": {"optimizer": "sgd"}},
	"fedmvp": {"momentum": {"batch_size": "4"}},
}

// keyUnobservable names the listed keys that the fixtures cannot show read,
// with the reason: the test names them as unread-but-listed (and fails if
// one does change something, so that the entry goes).
var keyUnobservable = map[string]map[string]string{
	"dpfpl": {"momentum": "the round replays the fixture's recorded DP draws, which cover one batch per client: " +
		"one SGD step, on which momentum cannot act (the production round reads it through parity.TrainOptions and the accountant's upload factor)"},
}

// keyInputs are a method's step and round inputs: a step fixture (the
// first of stepFixtures) and its round fixture (testdata/<dir>/round*).
type keyInputs struct {
	stepParams  string
	stepBatches []string
	roundParams string
	round       []string
}

// keyFixtures finds the inputs of method name; a round fixture's
// parameters are those of its "params" metadata, else the folder's
// init.safetensors or adapters_init.safetensors. pFedMMA's round file
// holds the training options only: its adapter settings come from the
// step file (as its round test merges them).
func keyFixtures(t *testing.T, name string) keyInputs {
	t.Helper()
	fx := stepFixtures(name)
	if len(fx) == 0 {
		t.Fatalf("%s has no step fixture", name)
	}
	in := keyInputs{stepParams: fx[0][0], stepBatches: []string{fx[0][1]}}
	dir := filepath.Dir(fx[0][1])
	round := filepath.Join(dir, "round.safetensors")
	if _, err := os.Stat(round); err != nil {
		t.Fatalf("%s has no round fixture %s", name, round)
	}
	in.round = []string{round}
	if name == "pfedmma" {
		in.round = append(in.round, fx[0][1])
	}
	meta := fileMeta(t, round)
	for _, p := range []string{meta["params"], "init.safetensors", "adapters_init.safetensors"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			in.roundParams = filepath.Join(dir, p)
			break
		}
	}
	if in.roundParams == "" {
		t.Fatalf("%s: no parameters for %s", name, round)
	}
	return in
}

// fileMeta reads a safetensors file's metadata.
func fileMeta(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Metadata()
}

// keyRun is one run of a method's settings, step and round on overridden
// metadata.
type keyRun struct {
	settings    any
	step, round tensor.Named
	err         error // the first error, from the settings, the step or the round
	where       string
}

// keyProbe runs method m on its loaded inputs with metadata edits applied
// to both (a value "" deletes the key).
type keyProbe struct {
	m           methods.Method
	step, round *parity.Fixture
}

// value is key's value in the step fixture's metadata, else the round's.
func (p keyProbe) value(key string) string {
	if v, ok := p.step.Meta[key]; ok {
		return v
	}
	return p.round.Meta[key]
}

func cloneFixture(f *parity.Fixture, edits map[string]string) *parity.Fixture {
	g := *f
	g.Params, g.Batch = f.Params.Clone(), f.Batch.Clone()
	g.Ints = maps.Clone(f.Ints)
	g.Meta = maps.Clone(f.Meta)
	for k, v := range edits {
		if v == "" {
			delete(g.Meta, k)
		} else {
			g.Meta[k] = v
		}
	}
	return &g
}

// run runs the settings of the step fixture, then (when round) the step and
// the round, stopping at the first error or, when stopEarly holds, at the
// first stage that differs from base.
func (p keyProbe) run(edits map[string]string, base *keyRun) keyRun {
	ctx := context.Background()
	var r keyRun
	s, _ := parity.SettingsOf(p.m)
	st, _ := parity.StepperOf(p.m)
	f := cloneFixture(p.step, edits)
	sec, err := s.SettingsFrom(f)
	if err != nil {
		return keyRun{err: err, where: "settings"}
	}
	r.settings = sec
	if base != nil && !reflect.DeepEqual(sec, base.settings) {
		return r
	}
	if r.step, err = st.Step(ctx, f); err != nil {
		return keyRun{settings: sec, err: err, where: "step"}
	}
	if base != nil && sameNamed(r.step, base.step) != "" {
		return r
	}
	if r.round, err = parity.RunRound(ctx, p.m, cloneFixture(p.round, edits)); err != nil {
		return keyRun{settings: sec, step: r.step, err: err, where: "round"}
	}
	return r
}

// diff says what differs between run r and the unedited run base ("" when
// nothing does).
func (r keyRun) diff(base keyRun) string {
	switch {
	case r.err != nil:
		return fmt.Sprintf("%s refused: %v", r.where, r.err)
	case !reflect.DeepEqual(r.settings, base.settings):
		return "settings differ"
	}
	if d := sameNamed(r.step, base.step); d != "" {
		return "step: " + d
	}
	if d := sameNamed(r.round, base.round); d != "" {
		return "round: " + d
	}
	return ""
}

// sameNamed is "" when a and b hold the same tensors bit for bit, else the
// first difference.
func sameNamed(a, b tensor.Named) string {
	for _, k := range slices.Sorted(maps.Keys(a)) {
		w, ok := b[k]
		if !ok {
			return k + " is new"
		}
		v := a[k]
		if !slices.Equal(v.Shape, w.Shape) || len(v.Data) != len(w.Data) {
			return fmt.Sprintf("%s: shape %v, was %v", k, v.Shape, w.Shape)
		}
		for i := range v.Data {
			if math.Float32bits(v.Data[i]) != math.Float32bits(w.Data[i]) {
				return fmt.Sprintf("%s[%d]: %v, was %v", k, i, v.Data[i], w.Data[i])
			}
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return k + " is gone"
		}
	}
	return ""
}

// probeValues are other valid values of key, whose value in the
// fixtures' metadata is cur ("" when absent), to try in turn.
func probeValues(key, cur string) []string {
	enums := map[string][]string{
		"optimizer":            {"sgd", "adamw", "run"},
		"ot":                   {"COT", "Sinkhorn"},
		"selection":            {"nearest", "random"},
		"variant":              {"fedot", "fedlt", "fedadapter", "all_global", "all_local"},
		"class_token_position": {"end", "middle", "front"},
		"factorization":        {"dpfpl", "dplora", "promptfl"},
		"scale":                {"sqrt", "linear"},
		"aggregation":          {"uniform mean", "weighted mean"},
		"csc":                  {"false", "true"},
		"normalize_classifier": {"false", "true"},
		"weighted_mean":        {"false", "true"},
		"per_example_dp":       {"false", "true"},
		"dataset":              {"Caltech101", "ImageNet"}, // PLOT: ImageNet adds the global logit
	}
	var out []string
	if vs, ok := enums[key]; ok {
		for _, v := range vs {
			if !strings.EqualFold(v, cur) {
				out = append(out, v)
			}
		}
		return out
	}
	x, err := strconv.ParseFloat(cur, 64)
	if err != nil {
		return []string{"1", "2", "0.5", "0", "3"}
	}
	var cand []float64
	if x == math.Trunc(x) && !strings.ContainsAny(cur, ".eE") {
		cand = []float64{2 * x, x + 1, x - 1, 0, 1}
	} else {
		cand = []float64{x / 2, 2 * x, x + 1, 0, 1}
	}
	for _, c := range cand {
		if c != x {
			out = append(out, strconv.FormatFloat(c, 'g', -1, 64))
		}
	}
	return slices.Compact(out)
}

// allKeys is every hyper-parameter some step or round could be given:
// parity.Keys, every method's section keys and FixtureKeys (a client<i>
// entry as client0 and client1), and the fixtures' metadata keys.
func allKeys(t *testing.T, metas ...map[string]string) []string {
	out := slices.Clone(parity.Keys)
	for _, m := range methods.All() {
		if s, ok := parity.SettingsOf(m); ok {
			for _, k := range s.FixtureKeys() {
				if rest, ok := strings.CutPrefix(k, "client<i>."); ok {
					out = append(out, "client0."+rest, "client1."+rest)
				} else {
					out = append(out, k)
				}
			}
		}
		if sec := m.DefaultConfig(); sec != nil {
			b, err := yaml.Marshal(sec)
			if err != nil {
				t.Fatal(err)
			}
			var kv map[string]any
			if err := yaml.Unmarshal(b, &kv); err != nil {
				t.Fatal(err)
			}
			out = slices.AppendSeq(out, maps.Keys(kv))
		}
	}
	for _, md := range metas {
		out = slices.AppendSeq(out, maps.Keys(md))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestFixtureKeys: every trainable method lists the metadata keys its
// step and round read (parity.Settings.FixtureKeys), and the list is
// exact. (a) Each listed key, changed to another valid value (under the
// settings keyWhen names, for a key read only under them), changes the
// method's settings, its step's output or its round's output, or is
// refused with an error naming the key; a listed key that changes
// nothing is named as unread. (b) The keys outside the list change
// nothing: the fixtures' metadata without them, and every other known key
// set to a value that no reader would take silently ("7"), give the same
// settings and bit-identical step and round outputs; otherwise the keys
// that do are named as read but unlisted. `pfedmma step`/`round` refuse
// the keys outside the list (cmd/pfedmma TestStepKeysRefused).
func TestFixtureKeys(t *testing.T) {
	skipPureGo(t)
	w, _, err := checkpoint.Load(testdata + "clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	forEach(t, func(t *testing.T, name string) {
		m, _ := methods.Get(name)
		s, ok := parity.SettingsOf(m)
		if !ok {
			t.Fatalf("%s implements no parity.Settings (SettingsFrom, FixtureKeys): `pfedmma step`/`round` cannot say which keys it reads", name)
		}
		if _, ok := parity.StepperOf(m); !ok {
			t.Fatalf("%s implements no parity.Stepper", name)
		}
		checkKeys(t, clip.New(w), m, s.FixtureKeys())
	})
}

// checkKeys checks that listed is exactly the keys method m reads.
func checkKeys(t *testing.T, model *clip.Model, m methods.Method, listed []string) {
	in := keyFixtures(t, m.Info().Name)
	load := func(params string, batches []string) *parity.Fixture {
		f, err := parity.Load(model, params, batches, nil)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	p := keyProbe{m: m, step: load(in.stepParams, in.stepBatches), round: load(in.roundParams, in.round)}
	base := p.run(nil, nil)
	if base.err != nil {
		t.Fatalf("the unedited %s fails: %v", base.where, base.err)
	}
	if d := p.run(nil, nil).diff(base); d != "" {
		t.Fatalf("two unedited runs differ (%s): the comparison needs a deterministic step and round", d)
	}
	name := m.Info().Name
	// (a) every listed key is read
	for _, key := range listed {
		if strings.HasPrefix(key, "client<i>.") {
			key = "client0." + strings.TrimPrefix(key, "client<i>.")
		}
		how := keyRead(p, name, key, base)
		if why, ok := keyUnobservable[name][key]; ok {
			if how != "" && !strings.HasPrefix(how, "unread: ") {
				t.Errorf("%s: %q is named unobservable (%s), but %s: drop it from keyUnobservable", name, key, why, how)
			}
			t.Logf("%s: listed, unread in the fixtures: %s", key, why)
			continue
		}
		if strings.HasPrefix(how, "unread: ") {
			t.Errorf("%s lists %q, %s", name, key, how)
			continue
		}
		if how == "" {
			t.Errorf("%s lists %q, but no other value of it (%v) changes its settings, step or round: it does not read it", name, key, probeValues(key, p.value(key)))
			continue
		}
		t.Logf("%s: %s", key, how)
	}
	// (b) nothing outside the list is read
	var strip, junk = map[string]string{}, map[string]string{}
	for _, k := range allKeys(t, p.step.Meta, p.round.Meta) {
		if parity.Listed(listed, k) {
			continue
		}
		strip[k] = ""
		junk[k] = "7"
	}
	for what, edits := range map[string]map[string]string{"without the unlisted keys of the fixtures' metadata": strip, "with every unlisted key set to 7": junk} {
		d := p.run(edits, nil).diff(base)
		if d == "" {
			continue
		}
		// name the keys
		var read []string
		for _, k := range slices.Sorted(maps.Keys(edits)) {
			if d1 := p.run(map[string]string{k: edits[k]}, nil).diff(base); d1 != "" {
				read = append(read, fmt.Sprintf("%s (%s)", k, d1))
			}
		}
		t.Errorf("%s %s: %s; %s reads these keys but does not list them: %s", name, what, d, name, strings.Join(read, "; "))
	}
}

// keyRead says how changing key changes method name's run: its settings,
// step or round output under some other value (preferred), else an error
// (a key the method does not read cannot make it fail); "" when no probe
// value changes anything, "unread: …" when the setting of keyWhen it is
// read under fails.
func keyRead(p keyProbe, name, key string, base keyRun) string {
	ctxs := []map[string]string{nil}
	if when := keyWhen[name][key]; when != nil {
		ctxs = append(ctxs, when)
	}
	cur := p.value(key)
	refused := ""
	for _, ctx := range ctxs {
		ref := base
		if ctx != nil {
			ref = p.run(ctx, nil)
			if ref.err != nil {
				return fmt.Sprintf("unread: the setting %v it is read under fails: %s: %v", ctx, ref.where, ref.err)
			}
		}
		for _, v := range probeValues(key, cur) {
			edits := maps.Clone(ctx)
			if edits == nil {
				edits = map[string]string{}
			}
			edits[key] = v
			r := p.run(edits, &ref)
			d := r.diff(ref)
			if ctx != nil && d != "" {
				d += fmt.Sprintf(" (with %v)", ctx)
			}
			switch {
			case r.err != nil && refused == "":
				refused = fmt.Sprintf("%s=%s: %s", key, v, d)
			case r.err == nil && d != "":
				return fmt.Sprintf("%s=%s: %s", key, v, d)
			}
		}
	}
	return refused
}

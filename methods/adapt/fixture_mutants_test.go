package adapt

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// The tests of this file kill mutants `make mutants` found alive in
// methods/adapt's fixture reading (issue 35).

// shapeParams is a fixture's parameters of 2 domains, n_ctx 3 and one
// AdaLN layer, with extra tensors added.
func shapeParams(extra map[string][]int) tensor.Named {
	p := tensor.Named{TextName(0): tensor.New(3, 8), TextName(1): tensor.New(3, 8), ParamVisual: tensor.New(2, 8)}
	w, b := adaLNNames(0)
	p[w], p[b] = tensor.New(12, 6), tensor.New(12)
	for name, shape := range extra {
		if shape == nil {
			delete(p, name)
			continue
		}
		p[name] = tensor.New(shape...)
	}
	return p
}

// TestShapeOfFixture: the fixture's parameters give n, n_ctx (from a
// prompt of at least one row) and the AdaLN layers; a tensor that is not
// ADAPT's (a prompt past n, a zero-padded or negative index, a layer past
// the last weight) is refused naming it; EMA targets pass.
func TestShapeOfFixture(t *testing.T) {
	sh, err := shapeOf(shapeParams(map[string][]int{EMATargetPrefix + TextName(1): {3, 8}}))
	if err != nil || sh.domains != 2 || sh.nCtx != 3 || sh.adaLNLayers != 1 {
		t.Errorf("shape %+v, %v; want 2 domains, n_ctx 3, 1 layer", sh, err)
	}
	if sh, err := shapeOf(shapeParams(map[string][]int{TextName(0): {1, 8}})); err != nil || sh.nCtx != 1 {
		t.Errorf("a one-row prompt: %+v, %v", sh, err)
	}
	for _, bad := range []struct {
		want  string
		extra map[string][]int
	}{
		{"hold no", map[string][]int{TextName(0): nil}},
		{"has shape", map[string][]int{TextName(0): {0, 8}}},
		{"has shape", map[string][]int{TextName(0): {24}}},
		{`"text_prompt.3"`, map[string][]int{TextName(3): {3, 8}}},
		{`"text_prompt.01"`, map[string][]int{TextPrefix + "01": {3, 8}}},
		{`"text_prompt.-1"`, map[string][]int{TextPrefix + "-1": {3, 8}}},
		{`"adaln.1.bias"`, map[string][]int{"adaln.1.bias": {12}}},
	} {
		if _, err := shapeOf(shapeParams(bad.extra)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: error %v, want one naming %s", bad.extra, err, bad.want)
		}
	}
}

// TestSettingsFromFixture: the metadata's n_ctx and adaln_layers must agree
// with the parameters; the optimizer is adamw, sgd or run; adamw and sgd
// need lr > 0 and weight_decay ≥ 0 (0 is fine), run takes the run's; ema
// lies in [0, 1], both ends included.
func TestSettingsFromFixture(t *testing.T) {
	m, _ := methodtest.PromptModel(3)
	from := func(meta map[string]string) (*Settings, error) {
		s, _, err := settingsFrom(&parity.Fixture{Model: m, Params: shapeParams(nil), Meta: meta})
		return s, err
	}
	for _, ok := range []map[string]string{
		{"n_ctx": "3", "adaln_layers": "1"},
		{"weight_decay": "0"},
		{"optimizer": "run", "lr": "0"},
		{"optimizer": " sgd "},
		{"ema": "0"},
		{"ema": "1"},
	} {
		s, err := from(ok)
		if err != nil {
			t.Errorf("%v: %v", ok, err)
			continue
		}
		if s.NCtx != 3 || !s.AdaLN || s.AdaLNLayers != 1 {
			t.Errorf("%v: n_ctx %d, adaln %v with %d layers; want 3, on, 1", ok, s.NCtx, s.AdaLN, s.AdaLNLayers)
		}
	}
	if s, _ := from(map[string]string{"optimizer": " sgd "}); s == nil || s.Optimizer != "sgd" {
		t.Errorf("optimizer \" sgd \" read as %v", s)
	}
	for _, bad := range []struct {
		want string
		meta map[string]string
	}{
		{"n_ctx=4", map[string]string{"n_ctx": "4"}},
		{"adaln_layers=2", map[string]string{"adaln_layers": "2"}},
		{"optimizer", map[string]string{"optimizer": "adam"}},
		{"lr 0", map[string]string{"lr": "0"}},
		{"weight_decay -0.1", map[string]string{"weight_decay": "-0.1"}},
		{"ema 1.5", map[string]string{"ema": "1.5"}},
		{"ema -0.5", map[string]string{"ema": "-0.5"}},
	} {
		if _, err := from(bad.meta); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: error %v, want one naming %s", bad.meta, err, bad.want)
		}
	}
}

// TestFixtureInt: an integer comes from the metadata (a whole number), an
// integer tensor of one value or a float tensor holding one whole value;
// anything else is refused naming it; absent, the default.
func TestFixtureInt(t *testing.T) {
	for _, tc := range []struct {
		f    parity.Fixture
		want int
		err  string
	}{
		{parity.Fixture{Meta: map[string]string{"domain": "2"}}, 2, ""},
		{parity.Fixture{Meta: map[string]string{"domain": "1.5"}}, 0, "want an integer"},
		{parity.Fixture{Ints: map[string][]int{"domain": {1}}}, 1, ""},
		{parity.Fixture{Ints: map[string][]int{"domain": {1, 2}}}, 0, "2 values"},
		{parity.Fixture{Batch: tensor.Named{"domain": {Shape: []int{1}, Data: []float32{3}}}}, 3, ""},
		{parity.Fixture{Batch: tensor.Named{"domain": {Shape: []int{1}, Data: []float32{0.5}}}}, 0, "one integer value"},
		{parity.Fixture{Batch: tensor.Named{"domain": {Shape: []int{2}, Data: []float32{1, 1}}}}, 0, "one integer value"},
		{parity.Fixture{}, 7, ""},
	} {
		got, err := fixtureInt(&tc.f, "domain", 7)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("%+v: %d, %v; want %d", tc.f, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: error %v, want one naming %q", tc.f, err, tc.err)
		}
	}
}

// TestFixtureTokens: the class prompts are whole rows of the model's
// context length.
func TestFixtureTokens(t *testing.T) {
	m, tokens := methodtest.PromptModel(3)
	f := &parity.Fixture{Model: m, Ints: map[string][]int{"tokens": tokens}}
	if _, C, err := fixtureTokens(f); err != nil || C != methodtest.PromptClasses {
		t.Errorf("%d classes, %v", C, err)
	}
	for _, bad := range [][]int{tokens[:len(tokens)-1], {}} {
		f.Ints["tokens"] = bad
		if _, _, err := fixtureTokens(f); err == nil || !strings.Contains(err.Error(), "whole number") {
			t.Errorf("%d ids: %v", len(bad), err)
		}
	}
}

// TestFixtureBoundaries: the step takes domains 0 and n−1 and labels 0 and
// C−1, and refuses domains −1 and n, label −1, no labels and images that do not match
// the labels, naming the range or the tensor; the round refuses a client
// domain of −1 or n, naming the range, and a file without clients (it reads no seed: it draws
// nothing).
func TestFixtureBoundaries(t *testing.T) {
	for _, c := range []struct {
		name, want string // want "": accepted
		edit       func(f *parity.Fixture)
		round      bool
	}{
		{"domain n−1", "", func(f *parity.Fixture) {
			f.Ints["domain"] = []int{fixDomains - 1}
			delete(f.Params, EMATargetPrefix+TextName(fixDomains-1)) // its own: no EMA target
		}, false},
		{"labels 0 and C−1", "", func(f *parity.Fixture) { f.Ints["labels"] = []int{0, fixClasses - 1, 1} }, false},
		{"domain −1", fmt.Sprintf("domain -1 outside 0..%d", fixDomains-1), func(f *parity.Fixture) { f.Ints["domain"] = []int{-1} }, false},
		{"label −1", fmt.Sprintf("label -1 outside 0..%d", fixClasses-1), func(f *parity.Fixture) { f.Ints["labels"][1] = -1 }, false},
		{"label C", fmt.Sprintf("label %d outside 0..%d", fixClasses, fixClasses-1), func(f *parity.Fixture) { f.Ints["labels"][1] = fixClasses }, false},
		{"no labels", `tensor "images"`, func(f *parity.Fixture) { f.Ints["labels"] = []int{} }, false},
		{"an image short", `tensor "images"`, func(f *parity.Fixture) { f.Ints["labels"] = []int{0, 1, 2, 3} }, false},
		{"domain 0", "", func(f *parity.Fixture) {
			f.Ints["domain"] = []int{0}
			delete(f.Params, EMATargetPrefix+TextName(0)) // its own: no EMA target
		}, false},
		{"domain n", fmt.Sprintf("domain %d outside 0..%d", fixDomains, fixDomains-1), func(f *parity.Fixture) { f.Ints["domain"] = []int{fixDomains} }, false},
		// the round fixture's parameters hold 2 text prompts
		{"client domain −1", "domain -1 outside 0..1", func(f *parity.Fixture) { f.Meta["client2.domain"] = "-1" }, true},
		{"client domain n", "domain 2 outside 0..1", func(f *parity.Fixture) { f.Meta["client2.domain"] = "2" }, true},
		{"no clients", `"client0.images"`, func(f *parity.Fixture) {
			for k := range f.Batch {
				if strings.HasPrefix(k, "client") {
					delete(f.Batch, k)
				}
			}
		}, true},
	} {
		var err error
		if c.round {
			f := roundFixture(false)
			c.edit(f)
			_, err = Method{}.FixtureRound(context.Background(), f)
		} else {
			f := stepFixture(false)
			c.edit(f)
			_, err = Method{}.Step(context.Background(), f)
		}
		if c.want == "" && err != nil {
			t.Errorf("%s: %v, want accepted", c.name, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

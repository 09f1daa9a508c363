package client

// Tests closing the survivors of the mutation run (docs/mutation/methods_client.json).
// They use this package's test helpers (world, build, fake) and the
// production API only.

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// TestPromptWords: a learner is built from the class prompts
// "<words> <class>.", tokenised as CLIP does: n_ctx "X" placeholders, or
// Spec.Words when set. The want rows are tokenised here, apart from the
// client.
func TestPromptWords(t *testing.T) {
	env := world(t)
	env.Tok = tokenizer.FromMerges(nil) // one symbol per character
	delete(env.SpaceTokenRows, 0)
	ctx := env.Model.W.Config.Text.ContextLength
	for _, tc := range []struct {
		spec *Spec
		text string
	}{
		{&Spec{Name: "m", Placeholder: 3}, "X X X"},
		{&Spec{Name: "m", Placeholder: 3, Words: "a photo of a"}, "a photo of a"},
	} {
		var got []int
		tc.spec.Shared = federation.Names("shared")
		tc.spec.NewLearner = func(_ int, tokens []int) (Learner, error) {
			got = tokens
			return newFake(2), nil
		}
		if _, err := Build(env, tc.spec); err != nil {
			t.Fatal(err)
		}
		var want []int
		for _, name := range []string{"class0", "class1"} {
			ids, err := env.Tok.Tokenize(tc.text+" "+name+".", ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ids...)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: the learner got the prompts %v, want those of %q", tc.text, got, tc.text+" <class>.")
		}
	}
}

// TestLoopStream: client t shuffles its examples with PCG(run seed,
// t.ID+1), the stream the recorded runs were made with; the order is
// recomputed here with math/rand.
func TestLoopStream(t *testing.T) {
	env := world(t)
	plan, _ := build(t, env, &Spec{Name: "m", Train: &train.Options{Epochs: 1, Batch: 1, Optimizer: "sgd", LR: 0.5}})
	for i, fc := range plan.Clients {
		c := fc.(*Client)
		var got []int
		ctx := methods.WithObserver(context.Background(), &methods.Observer{OnTrainBatch: func(_ *protocol.ClientTask, b []int) { got = append(got, b...) }})
		if _, err := c.Fit(ctx, federation.FitIns{}); err != nil {
			t.Fatal(err)
		}
		want := rand.New(rand.NewPCG(env.Seed, uint64(c.Task.ID)+1)).Perm(len(c.Task.Train))
		if !slices.Equal(got, want) {
			t.Errorf("client %d trained in the order %v, want PCG(%d, %d)'s %v", i, got, env.Seed, c.Task.ID+1, want)
		}
	}
}

// TestCheckInput: Build refuses a cache depth its learners cannot read,
// naming the method and the depth, and accepts the ones they can.
func TestCheckInput(t *testing.T) {
	env := world(t)
	for _, tc := range []struct {
		in    Input
		start int
		want  string // "" accepted
	}{
		{Features, methods.Features, ""},
		{Features, methods.TokenFeatures, ""},
		{Features, methods.Embeddings, "m: needs cached image features, the run caches depth"},
		{Features, 1, "m: needs cached image features, the run caches depth 1"},
		{Prefixes, 0, ""},
		{Prefixes, 1, ""},
		{Prefixes, 2, "m: needs the cached input of the first image block (depth 0 or 1), the run caches depth 2"},
		{Prefixes, methods.Features, "m: needs the cached input of the first image block"},
		{Embeddings, methods.Embeddings, ""},
		{Embeddings, methods.Features, "m: needs the cached patch embeddings"},
		{Block, 3, ""},
	} {
		env.Start = tc.start
		f := newFake(2)
		_, err := Build(env, &Spec{Name: "m", Input: tc.in, Shared: federation.Names("shared"),
			NewLearner: func(int, []int) (Learner, error) { return f, nil }})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("input %d at depth %d: %v", tc.in, tc.start, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("input %d at depth %d: %v, want %q", tc.in, tc.start, err, tc.want)
		}
	}
}

// TestUseBeforeFit: a client asked for its parameters or stepped before
// any Fit picks its learner and a workspace itself: Params lists its
// tensors with the learner's gradient buffers, and Step computes the
// fake's loss (the sum of the parameters) on its own parameters.
func TestUseBeforeFit(t *testing.T) {
	env := world(t)
	plan, f := build(t, env, &Spec{Name: "m"})
	c := plan.Clients[0].(*Client)
	ps := c.Params()
	if len(ps) != 2 || ps[0].Name != "own" || ps[1].Name != "shared" || &ps[0].Grad[0] != &f.g["own"].Data[0] {
		t.Fatalf("Params before Fit: %v", ps)
	}
	d := plan.Clients[1].(*Client)
	d.P["own"].Data[0] = 7
	loss, correct, err := d.Step(context.Background(), train.Batch{Items: []int{0, 2}, RNG: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	// client 1's labels are 1, 1, 0: the fake picks class 0, right on item 2 only
	if loss != 1+2+7+4 || correct != 1 {
		t.Errorf("Step before Fit: loss %v, %d correct; want 14 and 1", loss, correct)
	}
}

// TestEmptyTensor: a parameter of no values (a method configured with an
// empty part) is loaded, trained and uploaded like the others.
func TestEmptyTensor(t *testing.T) {
	env := world(t)
	f := newFake(2)
	f.p["none"], f.g["none"] = tensor.New(0), tensor.New(0)
	plan, err := Build(env, &Spec{Name: "m", Shared: federation.Names("shared", "none"),
		NewLearner: func(int, []int) (Learner, error) { return f, nil }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.Clients[0].Fit(context.Background(), federation.FitIns{Params: tensor.Named{"shared": tensor.New(2), "none": tensor.New(0)}})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := res.Params["none"]; !ok || len(n.Data) != 0 || !same(vals(res.Params, "shared"), []float32{-1, -1}) {
		t.Errorf("uploaded %v", res.Params)
	}
}

// ranked is a learner whose logits give row k of a batch the value
// 10·(B−k) everywhere and one more at its label: every row is right, and
// an earlier row's entries are larger than a later row's.
type ranked struct{ *fake }

func (r ranked) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	loss, terms, _, err := r.fake.Step(img, labels)
	B, C := len(labels), r.C
	logits := make([]float32, B*C)
	for k, y := range labels {
		for j := range C {
			logits[k*C+j] = float32(10 * (B - k))
		}
		logits[k*C+y]++
	}
	return loss, terms, logits, err
}

// TestTrainAccuracy: train_acc counts each row by its own argmax: a
// learner right on every row scores 100%.
func TestTrainAccuracy(t *testing.T) {
	env := world(t)
	f := newFake(2)
	plan, err := Build(env, &Spec{Name: "m", Shared: federation.Names("shared"),
		NewLearner: func(int, []int) (Learner, error) { return ranked{f}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plan.Clients {
		res, err := c.Fit(context.Background(), federation.FitIns{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Metrics["train_acc"] != 100 {
			t.Errorf("client %d: train_acc %v, want 100", c.ID(), res.Metrics["train_acc"])
		}
	}
}

// TestEvaluateReceives: Evaluate installs (through the site's Receive)
// only what the strategy sent; with nothing sent, the site is not asked to
// receive.
func TestEvaluateReceives(t *testing.T) {
	env := world(t)
	plan, _ := build(t, env, &Spec{Name: "m", Site: func(c *Client) (any, error) { return &hooks{c: c}, nil }})
	c := plan.Clients[0].(*Client)
	h := c.Site.(*hooks)
	if _, err := c.Evaluate(context.Background(), federation.EvaluateIns{}); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 0 {
		t.Errorf("Evaluate of nothing called %v", h.calls)
	}
	if _, err := c.Evaluate(context.Background(), federation.EvaluateIns{Params: tensor.Named{"shared": tensor.New(2)}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.calls, []string{"receive"}) {
		t.Errorf("Evaluate of the shared tensor called %v, want [receive]", h.calls)
	}
}

// echo is a learner whose logits of every record are its "shared"
// parameter (2 classes): scoring shows the parameters it was loaded with.
type echo struct{ *fake }

func (e echo) Logits(img []float32, B int) ([]float32, error) {
	var out []float32
	for range B {
		out = append(out, e.p["shared"].Data...)
	}
	return out, nil
}

// TestGlobalScorer: the global model is scored with the strategy's global
// tensors installed over the initial parameters, and the scorer returns
// the learner's logits.
func TestGlobalScorer(t *testing.T) {
	env := world(t)
	f := newFake(2)
	plan, err := Build(env, &Spec{Name: "m", Shared: federation.Names("shared"),
		NewLearner: func(int, []int) (Learner, error) { return echo{f}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	c := plan.Clients[0].(*Client)
	res, err := c.Fit(context.Background(), federation.FitIns{Params: tensor.Named{"shared": {Shape: []int{2}, Data: []float32{5, 6}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Strategy.Init([]federation.ClientInfo{{ID: 0, NumExamples: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := plan.Strategy.Aggregate(0, []federation.FitResult{{ClientID: 0, NumExamples: 3, Params: res.Params}}, nil); err != nil {
		t.Fatal(err)
	}
	sc, err := plan.GlobalScorer()
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]float32, env.Prefixer.RecordLen())
	got, err := sc.Logits(0, append(rec, rec...), 2)
	if err != nil {
		t.Fatal(err)
	}
	// one client's upload: the global shared tensor is its trained [4 5]
	if want := []float32{4, 5, 4, 5}; !same(got, want) {
		t.Errorf("global logits %v, want %v", got, want)
	}
}

// TestLoadStateLoop: loading a State with a site's extra state also
// restores the loop's generator and optimizer state (a shuffled,
// momentum-SGD client after one round), byte for byte.
func TestLoadStateLoop(t *testing.T) {
	env := world(t)
	spec := func() *Spec {
		return &Spec{Name: "m", Train: &train.Options{Epochs: 1, Batch: 2, Optimizer: "sgd", LR: 0.5, Momentum: 0.9},
			Site: func(c *Client) (any, error) { return &hooks{c: c}, nil }}
	}
	plan, _ := build(t, env, spec())
	c := plan.Clients[0].(*Client)
	if _, err := c.Fit(context.Background(), federation.FitIns{}); err != nil {
		t.Fatal(err)
	}
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := build(t, env, spec())
	d := other.Clients[0].(*Client)
	if err := d.LoadState(st); err != nil {
		t.Fatal(err)
	}
	got, err := d.Loop().State()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, want := range st {
		if name != "rng" && !strings.HasPrefix(name, "opt/") {
			continue
		}
		n++
		g, ok := got[name]
		if !ok || !sameBits(g, want) {
			t.Errorf("loop state %q not restored", name)
		}
	}
	if n < 2 {
		t.Fatalf("the saved state has %d loop entries, want the generator and the momentum", n)
	}
}

// sameBits reports whether a and b hold the same values bit for bit.
func sameBits(a, b *tensor.Tensor) bool {
	return slices.Equal(a.Shape, b.Shape) && slices.EqualFunc(a.Data, b.Data, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestPredictLearner: a predictor's learner is built from the class
// prompts "X … X <class>." (tokenised here, apart from the client) and
// holds the saved site's tensors; a failing build or a saved site without
// one of the learner's tensors is an error.
func TestPredictLearner(t *testing.T) {
	env := world(t)
	pe := methods.PredictEnv{Model: env.Model, Tok: tokenizer.FromMerges(nil)}
	saved := tensor.Named{"shared": {Shape: []int{2}, Data: []float32{5, 6}}, "own": {Shape: []int{2}, Data: []float32{7, 8}}}
	var got []int
	mk := func(tokens []int) (*fake, error) { got = tokens; return newFake(2), nil }
	f, err := PredictLearner(pe, 2, []string{"big_cat"}, saved, mk)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pe.Tok.Tokenize("X X big cat.", env.Model.W.Config.Text.ContextLength, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || !same(vals(f.p, "shared"), []float32{5, 6}) || !same(vals(f.p, "own"), []float32{7, 8}) {
		t.Errorf("learner of tokens %v, parameters %v %v", got, f.p["shared"].Data, f.p["own"].Data)
	}
	if _, err := PredictLearner(pe, 2, []string{"cat"}, tensor.Named{"shared": saved["shared"]}, mk); err == nil || !strings.Contains(err.Error(), `"own"`) {
		t.Errorf("saved site without own: %v", err)
	}
	bad := func([]int) (*fake, error) { return nil, errors.New("no learner") }
	if _, err := PredictLearner(pe, 2, []string{"cat"}, saved, bad); err == nil || err.Error() != "no learner" {
		t.Errorf("failing build: %v", err)
	}
	long := methods.PredictEnv{Model: env.Model, Tok: pe.Tok}
	if _, err := PredictLearner(long, 200, []string{"cat"}, saved, mk); err == nil {
		t.Errorf("a prompt longer than the context was accepted")
	}
}

package client

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// fake is a learner of two parameters, "shared" [2] and "own" [2], whose
// loss is the sum of its parameters (every gradient 1) and whose logits
// pick class 0: the test can compute by hand what training does.
type fake struct {
	p, g tensor.Named
	// seen is the parameters each Step saw, and the batch sizes.
	seen  [][]float32
	sizes []int
	// prepared counts Prepare calls.
	prepared int
	C        int
}

func newFake(C int) *fake {
	f := &fake{p: tensor.Named{"shared": tensor.New(2), "own": tensor.New(2)}, g: tensor.Named{"shared": tensor.New(2), "own": tensor.New(2)}, C: C}
	copy(f.p["shared"].Data, []float32{1, 2})
	copy(f.p["own"].Data, []float32{3, 4})
	return f
}

func (f *fake) Params() tensor.Named { return f.p }
func (f *fake) Grads() tensor.Named  { return f.g }

func (f *fake) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	var loss float64
	var seen []float32
	for _, n := range []string{"shared", "own"} {
		for i, v := range f.p[n].Data {
			loss += float64(v)
			f.g[n].Data[i] = 1
			seen = append(seen, v)
		}
	}
	f.seen = append(f.seen, seen)
	f.sizes = append(f.sizes, len(labels))
	logits := make([]float32, len(labels)*f.C)
	for k := range labels {
		logits[k*f.C] = 1
	}
	return loss, nil, logits, nil
}

func (f *fake) Prepare() error { f.prepared++; return nil }

func (f *fake) Logits(img []float32, B int) ([]float32, error) {
	return make([]float32, B*f.C), nil
}

// world is two clients of 3 images each (labels 0, 1, 0) over 2 classes on
// the fixtures' tiny CLIP, at feature depth, trained with plain SGD (lr
// 0.5, batch 2, one epoch, in order).
func world(t *testing.T) *methods.Env {
	t.Helper()
	m := paritytest.Model(t)
	S := m.W.Config.Vision.ImageSize
	ctx := m.W.Config.Text.ContextLength
	tokens := make([]int, 2*ctx)
	for c := range 2 {
		tokens[c*ctx], tokens[c*ctx+1], tokens[c*ctx+2] = 49406, 320+c, 49407
	}
	r := rand.New(rand.NewPCG(1, 2))
	px := func() []float32 {
		v := make([]float32, 3*3*S*S)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	clients := []parity.TensorClient{{Pixels: px(), Labels: []int{0, 1, 0}}, {Pixels: px(), Labels: []int{1, 1, 0}}}
	opts := train.Options{Epochs: 1, Batch: 2, Optimizer: "sgd", LR: 0.5, InOrder: true}
	env, err := parity.TensorEnv(m, methods.Features, tokens, 2, clients, opts, 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	return env
}

// build makes spec's plan on env with one shared fake learner.
func build(t *testing.T, env *methods.Env, spec *Spec) (*methods.Plan, *fake) {
	t.Helper()
	f := newFake(2)
	spec.NewLearner = func(int, []int) (Learner, error) { return f, nil }
	if spec.Shared == nil {
		spec.Shared = federation.Names("shared")
	}
	plan, err := Build(env, spec)
	if err != nil {
		t.Fatal(err)
	}
	return plan, f
}

func vals(n tensor.Named, name string) []float32 { return append([]float32(nil), n[name].Data...) }

func same(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFit: a client installs the received shared tensor, loads its own
// parameters into the shared learner before each batch, steps plain SGD
// over its 3 images in batches of 2 and 1, and uploads only the shared
// tensor; the other client's parameters are untouched.
func TestFit(t *testing.T) {
	env := world(t)
	plan, f := build(t, env, &Spec{Name: "m"})
	c0, c1 := plan.Clients[0].(*Client), plan.Clients[1].(*Client)
	c0.P["own"].Data[0] = 10 // the client's own, not the learner's
	res, err := c0.Fit(context.Background(), federation.FitIns{Round: 0, Params: tensor.Named{"shared": {Shape: []int{2}, Data: []float32{5, 6}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float32{{5, 6, 10, 4}, {4.5, 5.5, 9.5, 3.5}}
	if len(f.seen) != 2 || !same(f.seen[0], want[0]) || !same(f.seen[1], want[1]) {
		t.Errorf("the learner saw %v, want %v", f.seen, want)
	}
	if len(f.sizes) != 2 || f.sizes[0] != 2 || f.sizes[1] != 1 {
		t.Errorf("batch sizes %v, want [2 1]", f.sizes)
	}
	if len(res.Params) != 1 || !same(vals(res.Params, "shared"), []float32{4, 5}) {
		t.Errorf("uploaded %v, want only shared = [4 5]", res.Params)
	}
	if !same(vals(c0.P, "own"), []float32{9, 3}) {
		t.Errorf("own after training = %v, want [9 3]", c0.P["own"].Data)
	}
	if res.NumExamples != 3 || res.Metrics["loss"] != (25+23)/2.0 || res.Metrics["train_acc"] != 100*2/3.0 {
		t.Errorf("result %d examples, metrics %v; want 3, loss 24, train_acc 66.7", res.NumExamples, res.Metrics)
	}
	if !same(vals(c1.P, "shared"), []float32{1, 2}) || !same(vals(c1.P, "own"), []float32{3, 4}) {
		t.Errorf("client 1's parameters changed: %v %v", c1.P["shared"].Data, c1.P["own"].Data)
	}
}

// TestReceiveRefuses: a private, unknown or misshapen tensor from the
// server is an error naming it.
func TestReceiveRefuses(t *testing.T) {
	env := world(t)
	plan, _ := build(t, env, &Spec{Name: "m"})
	c := plan.Clients[1].(*Client)
	for _, tc := range []struct {
		in   tensor.Named
		want string
	}{
		{tensor.Named{"own": tensor.New(2)}, `m client 1: received unexpected tensor "own"`},
		{tensor.Named{"other": tensor.New(2)}, `m client 1: received unexpected tensor "other"`},
		{tensor.Named{"shared": tensor.New(3)}, `m client 1: received "shared" with shape [3], want [2]`},
	} {
		_, err := c.Fit(context.Background(), federation.FitIns{Params: tc.in})
		if err == nil || err.Error() != tc.want {
			t.Errorf("Fit: %v, want %q", err, tc.want)
		}
		_, err = c.Evaluate(context.Background(), federation.EvaluateIns{Params: tc.in})
		if err == nil || err.Error() != tc.want {
			t.Errorf("Evaluate: %v, want %q", err, tc.want)
		}
	}
}

// TestState: State saves P under "param/" with the loop's state; a fresh
// client loading it holds the same parameters, and a state without a
// parameter is refused naming it.
func TestState(t *testing.T) {
	env := world(t)
	plan, _ := build(t, env, &Spec{Name: "m"})
	c := plan.Clients[0].(*Client)
	if _, err := c.Fit(context.Background(), federation.FitIns{}); err != nil {
		t.Fatal(err)
	}
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	if !same(vals(st, "param/own"), vals(c.P, "own")) || !same(vals(st, "param/shared"), vals(c.P, "shared")) {
		t.Errorf("state %v does not hold P", st)
	}
	other, _ := build(t, env, &Spec{Name: "m"})
	d := other.Clients[0].(*Client)
	if err := d.LoadState(st); err != nil {
		t.Fatal(err)
	}
	if !same(vals(d.P, "own"), vals(c.P, "own")) {
		t.Errorf("loaded own = %v, want %v", d.P["own"].Data, c.P["own"].Data)
	}
	delete(st, "param/own")
	if err := d.LoadState(st); err == nil || !strings.Contains(err.Error(), "m client 0 state: no param/own of shape [2]") {
		t.Errorf("state without param/own: %v", err)
	}
}

// hooks is a site implementing every optional interface, recording calls.
type hooks struct {
	c     *Client
	calls []string
	extra float32
}

func (h *hooks) Receive(in tensor.Named) error {
	h.calls = append(h.calls, "receive")
	return h.c.ReceiveShared(in)
}
func (h *hooks) Upload() tensor.Named {
	h.calls = append(h.calls, "upload")
	return tensor.Named{"own": h.c.P["own"].Clone()}
}
func (h *hooks) Prepare(l Learner) error {
	h.calls = append(h.calls, "prepare")
	return l.Prepare()
}
func (h *hooks) Trained(name string) bool { return name == "shared" }
func (h *hooks) BeforeStep(train.Batch) error {
	h.calls = append(h.calls, "before")
	return nil
}
func (h *hooks) AfterBackward(train.Batch) error {
	h.calls = append(h.calls, "after")
	return nil
}
func (h *hooks) SaveExtra() (tensor.Named, error) {
	return tensor.Named{"x/extra": {Shape: []int{1}, Data: []float32{h.extra}}}, nil
}
func (h *hooks) LoadExtra(st tensor.Named) error {
	h.extra = st["x/extra"].Data[0]
	return nil
}
func (h *hooks) StartFit() { h.calls = append(h.calls, "start") }
func (h *hooks) Report(round int, m map[string]float64) error {
	h.calls = append(h.calls, "report")
	m["x"] = float64(round + 1)
	return nil
}
func (h *hooks) Kept() (tensor.Named, error) {
	return tensor.Named{"x/kept": {Shape: []int{1}, Data: []float32{h.extra}}}, nil
}

// TestSiteHooks: every optional interface of the site is used in its
// place: the start of a Fit, receive, before and after each step, the
// upload, the report, the trained filter (own stays), scoring's prepare,
// the extra state and what is kept.
func TestSiteHooks(t *testing.T) {
	env := world(t)
	plan, f := build(t, env, &Spec{Name: "m", Site: func(c *Client) (any, error) { return &hooks{c: c}, nil }})
	c := plan.Clients[0].(*Client)
	h := c.Site.(*hooks)
	res, err := c.Fit(context.Background(), federation.FitIns{Round: 4, Params: tensor.Named{"shared": tensor.New(2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.calls, " "); got != "start receive before after before after upload report" {
		t.Errorf("calls %q", got)
	}
	if res.Metrics["x"] != 5 || res.Metrics["loss"] == 0 {
		t.Errorf("metrics %v, want the loop's and the Reporter's x = 5", res.Metrics)
	}
	if !same(vals(res.Params, "own"), []float32{3, 4}) || len(res.Params) != 1 {
		t.Errorf("uploaded %v, want the Uploader's own = [3 4]", res.Params)
	}
	if !same(vals(c.P, "shared"), []float32{-1, -1}) {
		t.Errorf("shared after training = %v, want [-1 -1]", c.P["shared"].Data)
	}
	sc := c.scorer()
	if _, err := sc.Logits(0, make([]float32, env.Prefixer.RecordLen()), 1); err != nil {
		t.Fatal(err)
	}
	if f.prepared != 1 || h.calls[len(h.calls)-1] != "prepare" {
		t.Errorf("scoring: %d prepares, calls %v", f.prepared, h.calls)
	}
	h.extra = 9
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	h.extra = 0
	if err := c.LoadState(st); err != nil || h.extra != 9 {
		t.Errorf("extra state: %v, extra %v, want 9", err, h.extra)
	}
	kept, err := plan.Site(0)
	if err != nil || len(kept) != 3 || kept["x/kept"].Data[0] != 9 {
		t.Errorf("kept %v (%v), want P and x/kept = 9", kept, err)
	}
}

// TestWorkspaces: clients training one after the other reuse one batch
// workspace, and hold none between rounds.
func TestWorkspaces(t *testing.T) {
	env := world(t)
	plan, _ := build(t, env, &Spec{Name: "m"})
	c0, c1 := plan.Clients[0].(*Client), plan.Clients[1].(*Client)
	for _, c := range []*Client{c0, c1} {
		if _, err := c.Fit(context.Background(), federation.FitIns{}); err != nil {
			t.Fatal(err)
		}
		if c.ws != nil {
			t.Errorf("client %d holds its workspace after Fit", c.Task.ID)
		}
	}
	if c0.pool.Free() != 1 || c0.pool != c1.pool {
		t.Errorf("%d free workspaces after two sequential fits, want 1 shared", c0.pool.Free())
	}
}

// owner is a site owning its learner, whose parameters are the client's P,
// and evaluated in a group.
type owner struct {
	f *fake
	g federation.GroupEval
}

func (o *owner) Learner(int) (Learner, error)    { return o.f, nil }
func (o *owner) EvalGroup() federation.GroupEval { return o.g }

type group struct{ federation.GroupEval }

// TestOwnerSites: a method whose sites own their learners builds no shared
// one: every client starts from Spec.Init's parameters, trains its own
// learner (P is the learner's parameters), saves them under StatePrefix,
// and reports its site's evaluation group; a client without a Grouper
// site has none.
func TestOwnerSites(t *testing.T) {
	env := world(t)
	g := &group{}
	init := newFake(2).p
	spec := &Spec{Name: "m", Input: Block, Shared: federation.Names("shared"), StatePrefix: "adapter/",
		Init: func() (tensor.Named, error) { return init, nil },
		Site: func(c *Client) (any, error) {
			f := newFake(2)
			f.p = c.P
			return &owner{f: f, g: g}, nil
		}}
	plan, err := Build(env, spec)
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := plan.Clients[0].(*Client), plan.Clients[1].(*Client)
	if _, err := c0.Fit(context.Background(), federation.FitIns{}); err != nil {
		t.Fatal(err)
	}
	f0 := c0.Site.(*owner).f
	if len(f0.seen) != 2 || !same(f0.seen[1], []float32{0.5, 1.5, 2.5, 3.5}) || len(c1.Site.(*owner).f.seen) != 0 {
		t.Errorf("client 0's learner saw %v, client 1's %v", f0.seen, c1.Site.(*owner).f.seen)
	}
	if !same(vals(c1.P, "own"), []float32{3, 4}) || !same(vals(init, "own"), []float32{3, 4}) {
		t.Errorf("client 1 or the initial parameters changed: %v, %v", c1.P["own"].Data, init["own"].Data)
	}
	st, err := c0.State()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st["adapter/own"]; !ok {
		t.Errorf("state %v has no adapter/own", st)
	}
	if ge, ok := plan.Clients[0].(federation.GroupEvaluator); !ok || ge.EvalGroup() != g {
		t.Errorf("client 0's evaluation group is not its site's")
	}
	plain, _ := build(t, env, &Spec{Name: "m"})
	if g := plain.Clients[0].(*Client).EvalGroup(); g != nil {
		t.Errorf("a client without a Grouper site has the group %v", g)
	}
}

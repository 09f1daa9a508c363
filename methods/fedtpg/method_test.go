package fedtpg

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// tensorPlan builds FedTPG on a random tiny CLIP over in-memory clients,
// client i over its own classes classes[i] (cross-class), its settings s.
func tensorPlan(t *testing.T, s *Settings, classes [][]int, opts train.Options) (*methods.Env, *methods.Plan) {
	t.Helper()
	const C = 6
	m, tokens, names := randomModel(t, C, s.NCtx, 3)
	rng := rand.New(rand.NewPCG(8, 1))
	var clients []parity.TensorClient
	for _, cl := range classes {
		const N = 6
		S := m.W.Config.Vision.ImageSize
		tc := parity.TensorClient{Pixels: gradcheck.Rand(rng, N*3*S*S, 1)}
		for k := 0; k < N; k++ {
			tc.Labels = append(tc.Labels, rng.IntN(len(cl)))
		}
		clients = append(clients, tc)
	}
	env, err := parity.TensorEnv(m, methods.Features, tokens, C, clients, opts, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	rm := &roundMethod{s: s, tokens: tokens, names: names, classes: classes}
	plan, err := rm.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	methodtest.InitStrategy(t, plan)
	return env, plan
}

func testSettings() *Settings {
	s := fromConfig(DefaultConfig())
	s.NCtx, s.CrossHeads, s.SelfHeads, s.FFMult, s.Depth = 3, 2, 2, 2, 1
	return s
}

func testOpts() train.Options {
	return train.Options{Epochs: 1, Batch: 4, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 1e-5}
}

// TestResumeBitIdentical: three rounds straight equal two rounds, a save of
// every site's state and the server's, a fresh plan restored from it, and
// the third round — every site's generator, optimizer and random state and
// the global generator, bit for bit. Client 2 sits out round 1.
func TestResumeBitIdentical(t *testing.T) {
	s := testSettings()
	classes := [][]int{{0, 1}, {2, 3, 4}, {1, 5}}
	build := func() *methods.Plan {
		_, plan := tensorPlan(t, s, classes, testOpts())
		return plan
	}
	r := methodtest.Resume(t, build, [3][]int{{0, 1, 2}, {0, 1}, {0, 1, 2}})
	for _, c := range r.Straight.Clients {
		a, err := c.State()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := a["opt/momentum_buffer/"+Prefix+nameSoftPrompt]; !ok {
			t.Fatal("site state holds no momentum: the optimizer is not kept")
		}
	}
	r.GlobalMoved(t, "generator")
}

// TestSharedAndMean: every upload is exactly the whole generator (nothing
// private), the server's mean is uniform by default and n_i-weighted with
// weighted_mean, and each client trains over its own classes only.
func TestSharedAndMean(t *testing.T) {
	for _, weighted := range []bool{false, true} {
		s := testSettings()
		s.WeightedMean = weighted
		s.OwnClasses = false // the test doubles client 1's images in the task after Build
		classes := [][]int{{0, 1}, {2, 3, 4}}
		opts := testOpts()
		env, plan := tensorPlan(t, s, classes, opts)
		// client 1 holds twice the images of client 0
		env.Task.Clients[1].Train = append(env.Task.Clients[1].Train, env.Task.Clients[1].Train...)
		env.Task.Clients[1].Labels = append(env.Task.Clients[1].Labels, env.Task.Clients[1].Labels...)
		res := methodtest.Round(t, plan, 0, []int{0, 1})
		want := len(s.config(0).Gen(8, 6).Shapes()) // depth 1: 17 + 12
		for _, r := range res {
			if len(r.Params) != want {
				t.Fatalf("client %d uploads %d tensors, want the whole generator's %d", r.ClientID, len(r.Params), want)
			}
			for name := range r.Params {
				if !strings.HasPrefix(name, Prefix) {
					t.Errorf("upload holds %q", name)
				}
			}
		}
		n0, n1 := float64(res[0].NumExamples), float64(res[1].NumExamples)
		if n0 == n1 {
			t.Fatal("clients of equal size: the weights are not tested")
		}
		w0, w1 := 0.5, 0.5
		if weighted {
			w0, w1 = n0/(n0+n1), n1/(n0+n1)
		}
		g := plan.Global()
		for name, gt := range g {
			a, b := res[0].Params[name].Data, res[1].Params[name].Data
			for i, v := range gt.Data {
				if d := math.Abs(float64(v) - (w0*float64(a[i]) + w1*float64(b[i]))); d > 1e-6*(1+math.Abs(float64(v))) {
					t.Fatalf("weighted %v: global %s[%d] = %g, want %g", weighted, name, i, v, w0*float64(a[i])+w1*float64(b[i]))
				}
			}
		}
	}
}

// TestNovelClasses: the generated prompt depends on the class list (the
// point of base-to-novel): a client's generator scores classes it never
// trained on from their names, and two class lists get different prompts.
func TestNovelClasses(t *testing.T) {
	s := testSettings()
	m, tokens, names := randomModel(t, 6, s.NCtx, 3)
	rows := func(cl []int, src []int) []int {
		var out []int
		for _, c := range cl {
			out = append(out, src[c*12:(c+1)*12]...)
		}
		return out
	}
	var ctx [][]float32
	for _, cl := range [][]int{{0, 1, 2}, {3, 4, 5}} {
		l, err := New(m, rows(cl, tokens), rows(cl, names), s.config(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Prepare(); err != nil {
			t.Fatal(err)
		}
		ctx = append(ctx, slices.Clone(l.Generator().Output()))
		img := gradcheck.Rand(rand.New(rand.NewPCG(1, 1)), 2*6, 1)
		lg, err := l.Logits(img, 2)
		if err != nil || len(lg) != 2*3 {
			t.Fatalf("logits %v, %v", lg, err)
		}
	}
	if slices.Equal(ctx[0], ctx[1]) {
		t.Error("two class lists generate the same prompt")
	}
}

// TestNameRowsMatchFixture: the bare-name rows derived from the prompt rows
// are the fixture's name_tokens.
func TestNameRowsMatchFixture(t *testing.T) {
	f := load(t, "init.safetensors", "step.safetensors")
	got, err := NameRows(f.Ints["tokens"], 77, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, f.Ints["name_tokens"]) {
		t.Errorf("derived name rows differ from name_tokens")
	}
	if _, err := NameRows(f.Ints["tokens"], 77, 9); err == nil {
		t.Error("9 placeholders in rows of 4: no error")
	}
}

// TestSettings: every bad setting is refused naming its key; d_ctx > 1 with
// the reason.
func TestSettings(t *testing.T) {
	methodtest.RejectsSettings(t, "fedtpg", [][2]string{
		{"fedtpg.n_ctx=0", "fedtpg.n_ctx"},
		{"fedtpg.d_ctx=2", "fedtpg.d_ctx"},
		{"fedtpg.d_ctx=2", "overwrite"}, // with the reason
		{"fedtpg.depth=-1", "fedtpg.depth"},
		{"fedtpg.cross_heads=0", "fedtpg.cross_heads"},
		{"fedtpg.ff_mult=0", "fedtpg.ff_mult"},
		{"fedtpg.init_std=-1", "fedtpg.init_std"},
	})
	m, tokens, names := randomModel(t, 3, 4, 3)
	c := DefaultConfig()
	c.CrossHeads = 3 // the width 8 is not a multiple of 3
	if _, err := New(m, tokens, names, c); err == nil || !strings.Contains(err.Error(), "cross_heads") {
		t.Errorf("3 heads on width 8: %v", err)
	}
	c = DefaultConfig()
	c.DCtx = 2
	if _, err := New(m, tokens, names, c); err == nil || !strings.Contains(err.Error(), "d_ctx") {
		t.Errorf("d_ctx 2: %v", err)
	}
}

// TestPredictorMatchesEvaluation: the Predictor built from a saved site
// scores pixels bit for bit as the evaluation scores their cached features
// (the learner of the Build path: class prompts and names through the
// run's tokenizer), on classes with underscores and multi-word names.
func TestPredictorMatchesEvaluation(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	s := fromConfig(DefaultConfig())
	classes := []string{"red_circle", "blue square", "green striped triangle"}
	env := &methods.Env{Model: m, Tok: tok, Template: "a photo of a {}.",
		Task: &protocol.Task{Dataset: &dataset.Dataset{Classes: classes}, Spaces: []protocol.Space{{Classes: []int{0, 1, 2}}}}}
	tokens, err := env.ClassPromptTokens(0, client.Placeholder(s.NCtx))
	if err != nil {
		t.Fatal(err)
	}
	names, err := nameRows(env, 0, tokens, nil, s.NCtx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tokens, names, s.config(3))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 3))
	saved := l.Params().Clone()
	for _, p := range saved {
		for i, v := range gradcheck.Rand(rng, len(p.Data), 0.05) {
			p.Data[i] += v
		}
	}
	for name, p := range saved {
		copy(l.Params()[name].Data, p.Data)
	}
	S := m.W.Config.Vision.ImageSize
	const B = 4
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	want, err := l.Logits(prefixcache.ImageRecords(m, methods.Features, px, B, nil), B)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := Method{}.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: env.Template}, s, saved)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	methodtest.SameLogits(t, got, want)
	if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, s, tensor.Named{}); err == nil {
		t.Error("predictor without a generator accepted")
	}
}

// TestOwnClasses: with own_classes (the default) a client whose images hold
// classes 1 and 4 of a 6-class space trains a 2-class classifier over them,
// with its labels renumbered, and the run's task is not touched; without it
// the client trains over the whole space.
func TestOwnClasses(t *testing.T) {
	for _, own := range []bool{true, false} {
		s := testSettings()
		s.OwnClasses = own
		m, tokens, _ := randomModel(t, 6, s.NCtx, 3)
		S := m.W.Config.Vision.ImageSize
		rng := rand.New(rand.NewPCG(2, 5))
		labels := []int{4, 1, 1, 4, 4}
		env, err := parity.TensorEnv(m, methods.Features, tokens, 6,
			[]parity.TensorClient{{Pixels: gradcheck.Rand(rng, 5*3*S*S, 1), Labels: labels}}, testOpts(), 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { env.TrainStore.Close() })
		plan, err := Method{}.Build(env, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(env.Task.Spaces) != 1 || env.Task.Clients[0].TrainSpace != 0 || !slices.Equal(env.Task.Clients[0].Labels, labels) {
			t.Fatal("Build changed the run's task")
		}
		c := plan.Clients[0].(*client.Client)
		l, err := c.Learner()
		if err != nil {
			t.Fatal(err)
		}
		K, wantLabels := l.(*Learner).K, labels
		if own {
			wantLabels = []int{1, 0, 0, 1, 1}
			if K != 2 || !slices.Equal(c.Env.Task.Spaces[c.Task.TrainSpace].Classes, []int{1, 4}) {
				t.Errorf("own classes: %d classes %v", K, c.Env.Task.Spaces[c.Task.TrainSpace].Classes)
			}
		} else if K != 6 {
			t.Errorf("whole space: %d classes", K)
		}
		if !slices.Equal(c.Task.Labels, wantLabels) {
			t.Errorf("own %v: labels %v, want %v", own, c.Task.Labels, wantLabels)
		}
		if _, err := plan.Clients[0].Fit(context.Background(), federation.FitIns{Round: 0}); err != nil {
			t.Fatal(err)
		}
	}
}

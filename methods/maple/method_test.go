package maple

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

func testSettings() *Settings { return &Settings{NCtx: 2, PromptDepth: 2, InitStd: 0.5} }

func testOpts() train.Options {
	return train.Options{Epochs: 1, Batch: 4, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 1e-5}
}

// tensorPlan builds MaPLe on the random 3-block CLIP over three in-memory
// clients of 6 images each, with the server initialised.
func tensorPlan(t *testing.T, s *Settings) *methods.Plan {
	t.Helper()
	const C = 4
	m, tokens := randomModel(C, s.NCtx)
	clients := methodtest.TensorClients(rand.New(rand.NewPCG(8, 1)), 3, 6, m.W.Config.Vision.ImageSize, C)
	depth, err := Method{}.Depth(s, 3)
	if err != nil {
		t.Fatal(err)
	}
	env, err := parity.TensorEnv(m, depth, tokens, C, clients, testOpts(), 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	return methodtest.Build(t, Method{}, env, s)
}

// TestResumeBitIdentical: three rounds straight equal two rounds, a save of
// every site's state and the server's, a fresh plan restored from it, and
// the third round — bit for bit. Client 2 sits out round 1.
func TestResumeBitIdentical(t *testing.T) {
	s := testSettings()
	r := methodtest.Resume(t, func() *methods.Plan { return tensorPlan(t, s) }, [3][]int{{0, 1, 2}, {0, 1}, {0, 1, 2}})
	for _, c := range r.Straight.Clients {
		a, err := c.State()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := a["opt/momentum_buffer/"+ParamText(1)]; !ok {
			t.Fatal("site state holds no momentum of the deep text prompt")
		}
	}
	r.GlobalMoved(t, "prompt learner")
}

// TestSharedWhole: every upload is exactly the whole prompt learner (both
// encoders' prompts and the couplings) and the global is the n_i-weighted
// mean of the uploads.
func TestSharedWhole(t *testing.T) {
	plan := tensorPlan(t, testSettings())
	res := methodtest.Round(t, plan, 0, []int{0, 1, 2})
	want := 3 + 3*(testSettings().PromptDepth-1)
	for _, r := range res {
		if len(r.Params) != want {
			t.Errorf("client %d uploads %d tensors, want %d", r.ClientID, len(r.Params), want)
		}
		for name := range r.Params {
			if !strings.HasPrefix(name, Prefix) {
				t.Errorf("client %d uploads %q", r.ClientID, name)
			}
		}
	}
	g := plan.Global()
	for name, t0 := range g {
		var n float64
		for _, r := range res {
			n += float64(r.NumExamples)
		}
		for i, v := range t0.Data {
			var mean float64
			for _, r := range res {
				mean += float64(r.NumExamples) / n * float64(r.Params[name].Data[i])
			}
			if math.Abs(mean-float64(v)) > 1e-6*(1+math.Abs(mean)) {
				t.Fatalf("global %s[%d] = %g, weighted mean %g", name, i, v, mean)
			}
		}
	}
}

// TestSettings: prompt depth beyond the model's blocks is refused naming the
// key; the defaults are the authors'.
func TestSettings(t *testing.T) {
	s := testSettings()
	s.PromptDepth = 4
	if _, err := (Method{}).Depth(s, 3); err == nil || !strings.Contains(err.Error(), "prompt_depth") {
		t.Errorf("prompt_depth 4 on 3 blocks: %v", err)
	}
	d := Method{}.DefaultConfig().(*Settings)
	if d.NCtx != 2 || d.PromptDepth != 9 || d.InitStd != 0.02 || d.CtxInit != "a photo of a" {
		t.Errorf("defaults %+v, want n_ctx 2, prompt_depth 9, init_std 0.02, ctx_init \"a photo of a\"", d)
	}
	d.NCtx = 5 // the code's CTX_INIT applies only to n_ctx ≤ 4
	if w, from := d.words(); from || w != "X X X X X" {
		t.Errorf("n_ctx 5 with ctx_init: words %q, from tokens %v", w, from)
	}
	cfg := Config{NCtx: 3, Depth: 1, CtxFromTokens: true}
	rows := make([]int, 2*12)
	copy(rows, []int{18, 7, 8, 9, 3, 19})
	copy(rows[12:], []int{18, 7, 8, 10, 3, 19})
	if err := checkInitWords(rows, 12, cfg); err == nil || !strings.Contains(err.Error(), "ctx_init") {
		t.Errorf("ctx_init of 2 words for n_ctx 3: %v", err)
	}
	m, tokens := randomModel(3, 2)
	if _, err := New(m, tokens, Config{NCtx: 2, Depth: 0}); err == nil || !strings.Contains(err.Error(), "prompt_depth") {
		t.Errorf("depth 0: %v", err)
	}
	if _, err := New(m, tokens, Config{NCtx: 9, Depth: 1}); err == nil || !strings.Contains(err.Error(), "EOT") {
		t.Errorf("n_ctx past the EOT: %v", err)
	}
}

// TestPredictorMatchesEvaluation: the Predictor built from a saved site
// scores pixels bit for bit as the evaluation scores their cached prefixes,
// on classes with underscores and multi-word names.
func TestPredictorMatchesEvaluation(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	classes := []string{"red_circle", "blue square", "green striped triangle"}
	for _, init := range []string{"", "a photo of a"} {
		s := &Settings{NCtx: 2, PromptDepth: 2, InitStd: 0.02, CtxInit: init}
		words, fromTokens := s.words()
		if fromTokens != (init != "") {
			t.Fatalf("ctx_init %q: from tokens %v", init, fromTokens)
		}
		var tokens []int
		for _, c := range classes {
			ids, err := tok.Tokenize(words+" "+strings.ReplaceAll(c, "_", " ")+".", m.W.Config.Text.ContextLength, false)
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, ids...)
		}
		l, err := New(m, tokens, s.config(3))
		if err != nil {
			t.Fatal(err)
		}
		if fromTokens { // ctx starts as the embeddings of "a photo"
			D := m.W.Config.Text.Width
			for i := 0; i < s.NCtx; i++ {
				id := tokens[1+i]
				if !slices.Equal(l.Params()[ParamCtx].Data[i*D:(i+1)*D], m.Text.W.TokenEmb[id*D:(id+1)*D]) {
					t.Fatalf("ctx_init: ctx row %d is not the embedding of token %d", i, id)
				}
			}
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
		const B = 3
		px := gradcheck.Rand(rng, B*3*S*S, 1)
		if err := l.Prepare(); err != nil {
			t.Fatal(err)
		}
		depth, err := Method{}.Depth(s, m.W.Config.Vision.Layers)
		if err != nil {
			t.Fatal(err)
		}
		want, err := l.Logits(prefixcache.ImageRecords(m, depth, px, B, nil), B)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := Method{}.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}, s, saved)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pr.Logits(px, B, classes)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d logits, want %d", len(got), len(want))
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("ctx_init %q: logit %d: predictor %g, evaluation %g", init, i, got[i], want[i])
			}
		}
		if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, s, tensor.Named{}); err == nil {
			t.Error("predictor without a prompt learner accepted")
		}
	}
}

// TestFitModel: the authors' depth 9 of 12 becomes 3 on a 4-block model;
// a depth that fits is kept.
func TestFitModel(t *testing.T) {
	s := Method{}.DefaultConfig().(*Settings)
	if c := s.FitModel(4); len(c) != 1 || s.PromptDepth != 3 || !strings.Contains(c[0], "prompt_depth 9 → 3") {
		t.Errorf("fit to 4 blocks: %v, depth %d", c, s.PromptDepth)
	}
	if c := s.FitModel(12); c != nil || s.PromptDepth != 3 {
		t.Errorf("fit of a depth that fits: %v, depth %d", c, s.PromptDepth)
	}
}

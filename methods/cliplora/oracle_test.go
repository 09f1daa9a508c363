package cliplora

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// constSource is a rand.Source that returns one value forever.
type constSource uint64

func (s constSource) Uint64() uint64 { return uint64(s) }

// replayMask is the inverted-dropout mask of probability p over n values
// as the spec states it, from an independent replay of the generator:
// each 64-bit draw gives two 32-bit uniforms, low word first; a uniform
// below p·2³² drops (0), else the value is kept scaled by 1/(1−p).
func replayMask(rng *rand.Rand, n int, p float64) []float64 {
	out := make([]float64, 0, n)
	for len(out) < n {
		u := rng.Uint64()
		for _, w := range []uint64{u & (1<<32 - 1), u >> 32} {
			if len(out) == n {
				break
			}
			if float64(w) < p*(1<<32) {
				out = append(out, 0)
			} else {
				out = append(out, 1/(1-p))
			}
		}
	}
	return out
}

// TestDropoutMask: dropoutForward's masks over two successive calls (odd
// and even lengths, so the second call's draws show how many the first
// used) are the replayed ones, keep = 1/(1−p) exactly in float32, and
// h = in ⊙ mask.
func TestDropoutMask(t *testing.T) {
	const p = 0.25
	for _, n := range []int{8, 7} {
		rng, ref := rand.New(rand.NewPCG(4, 5)), rand.New(rand.NewPCG(4, 5))
		for call := 0; call < 2; call++ {
			in := make([]float32, n)
			for i := range in {
				in[i] = float32(i) - 2.5
			}
			h, mask := make([]float32, n), make([]float32, n)
			dropoutForward(h, mask, in, p, rng)
			want := replayMask(ref, n, p)
			for i := range want {
				if mask[i] != float32(want[i]) || h[i] != in[i]*float32(want[i]) {
					t.Fatalf("n %d call %d: mask[%d] = %v, h = %v; want %v, %v", n, call, i, mask[i], h[i], want[i], in[i]*float32(want[i]))
				}
			}
		}
	}
	// a uniform exactly at p·2³² is kept; a zero one drops
	h, mask := make([]float32, 2), make([]float32, 2)
	dropoutForward(h, mask, []float32{1, 1}, p, rand.New(constSource(1<<30)))
	if mask[0] != float32(1/(1-p)) || mask[1] != 0 {
		t.Errorf("uniforms 2³⁰ (= p·2³²) and 0: mask %v, want [%v 0]", mask, 1/(1-p))
	}
}

// TestForwardDropout: a training forward with dropout p > 0 adds
// s·(h ⊙ mask) Aᵀ Bᵀ with the replayed mask; with dropout 0 it adds
// s·h Aᵀ Bᵀ and draws nothing from the generator (the training loop's,
// whose next permutation orders the following epoch).
func TestForwardDropout(t *testing.T) {
	const N, D, R = 3, 4, 2
	rng := rand.New(rand.NewPCG(7, 8))
	h := make([]float32, N*D)
	for i := range h {
		h[i] = float32(rng.NormFloat64())
	}
	A, B := make([]float32, R*D), make([]float32, D*R)
	for i := range A {
		A[i], B[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	for _, p := range []float64{0.5, 0} {
		l := &blockLoRA{D: D, R: R, scale: 0.7, dropout: p, rng: rand.New(rand.NewPCG(1, 1))}
		l.A[1], l.B[1] = A, B
		out := make([]float32, N*D)
		l.Forward(1, out, D, h, N, true)
		ref := rand.New(rand.NewPCG(1, 1))
		mask := make([]float64, N*D)
		for i := range mask {
			mask[i] = 1
		}
		if p > 0 {
			mask = replayMask(ref, N*D, p)
		}
		for n := 0; n < N; n++ {
			for o := 0; o < D; o++ {
				var want float64
				for r := 0; r < R; r++ {
					var z float64
					for i := 0; i < D; i++ {
						z += float64(h[n*D+i]) * mask[n*D+i] * float64(A[r*D+i])
					}
					want += 0.7 * z * float64(B[o*R+r])
				}
				if got := float64(out[n*D+o]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("dropout %v: out[%d,%d] = %v, want %v", p, n, o, got, want)
				}
			}
		}
		if p == 0 && l.rng.Uint64() != ref.Uint64() {
			t.Error("dropout 0: the forward drew from the generator")
		}
	}
}

// TestInitParams: A is Kaiming-uniform, (2u − 1)/√D from the generator's
// successive uniforms u (visual then text, block by block, q, k, v), and B
// is zero.
func TestInitParams(t *testing.T) {
	towers := []tower{{"visual", 2, 16}, {"text", 1, 4}}
	p := tensor.Named{}
	initParams(p, towers, 3, rand.New(rand.NewPCG(2, 3)))
	ref := rand.New(rand.NewPCG(2, 3))
	for _, tw := range towers {
		bound := 1 / math.Sqrt(float64(tw.width))
		for j := 0; j < tw.layers; j++ {
			for _, part := range Parts {
				a, b := p[Name(tw.name, j, part, "A")], p[Name(tw.name, j, part, "B")]
				if len(a.Data) != 3*tw.width || len(b.Data) != 3*tw.width {
					t.Fatalf("%s %d %s: A %v, B %v, want [3 %d], [%d 3]", tw.name, j, part, a.Shape, b.Shape, tw.width, tw.width)
				}
				for i, v := range a.Data {
					if want := float32((2*ref.Float64() - 1) * bound); v != want {
						t.Fatalf("%s: A[%d] = %v, want %v", Name(tw.name, j, part, "A"), i, v, want)
					}
				}
				for _, v := range b.Data {
					if v != 0 {
						t.Fatalf("%s is not zero", Name(tw.name, j, part, "B"))
					}
				}
			}
		}
	}
}

// TestProductNames: Product's DeltaName(tower, j, part) is s·B·A of that
// tower's block j's factors (computed in float64 from the named factors),
// for a model whose towers have different widths.
func TestProductNames(t *testing.T) {
	m := tinyModel(4)
	m.W.Config.Text.Width = 4 // only the LoRA shapes are read
	s := &Settings{Rank: 2, Alpha: 1, Scale: "sqrt"}
	rng := rand.New(rand.NewPCG(3, 3))
	l := New(m, s, rng)
	for _, name := range slices.Sorted(maps.Keys(l.Params)) {
		v := l.Params[name]
		for i := range v.Data {
			v.Data[i] = float32(rng.NormFloat64())
		}
	}
	prod := l.Product(m.W.Config)
	sc := 1 / math.Sqrt(2)
	for _, tw := range towersOf(m.W.Config) {
		D := tw.width
		for j := 0; j < tw.layers; j++ {
			for _, part := range Parts {
				A, B := l.Params[Name(tw.name, j, part, "A")].Data, l.Params[Name(tw.name, j, part, "B")].Data
				got := prod[DeltaName(tw.name, j, part)]
				if got == nil || len(got.Data) != D*D {
					t.Fatalf("%s: %v, want [%d %d]", DeltaName(tw.name, j, part), got, D, D)
				}
				for o := 0; o < D; o++ {
					for i := 0; i < D; i++ {
						var want float64
						for r := 0; r < 2; r++ {
							want += sc * float64(B[o*2+r]) * float64(A[r*D+i])
						}
						if g := float64(got.Data[o*D+i]); math.Abs(g-want) > 1e-5*(1+math.Abs(want)) {
							t.Fatalf("%s[%d,%d] = %v, want %v", DeltaName(tw.name, j, part), o, i, g, want)
						}
					}
				}
			}
		}
	}
}

// TestCheckBounds: dropout takes [0, 1) and the aggregate ab, product or
// nothing (sections saved before the option); others are refused naming
// the key.
func TestCheckBounds(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Settings)
		want string // "" accepted
	}{
		{func(s *Settings) { s.Dropout = 0 }, ""},
		{func(s *Settings) { s.Dropout = 0.999 }, ""},
		{func(s *Settings) { s.Dropout = 1 }, "clip_lora.dropout"},
		{func(s *Settings) { s.Dropout = -0.1 }, "clip_lora.dropout"},
		{func(s *Settings) { s.Aggregate = "" }, ""},
		{func(s *Settings) { s.Aggregate = AggregateProduct }, ""},
		{func(s *Settings) { s.Aggregate = "mean" }, "clip_lora.aggregate"},
	} {
		sec := Method{}.DefaultConfig().(*Settings)
		tc.mod(sec)
		err := config.CheckSection("clip_lora", sec)
		if tc.want == "" && err != nil {
			t.Errorf("%+v: %v", sec, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: error %v, want one naming %s", sec, err, tc.want)
		}
	}
}

// TestStepCorrect: a client's Step counts the batch's images whose
// largest logit (scored by the evaluation scorer on the same LoRA,
// dropout 0) is the label.
func TestStepCorrect(t *testing.T) {
	m := tinyModel(4)
	r := rand.New(rand.NewPCG(9, 1))
	const N = 8
	px := make([]float32, N*3*8*8)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	labels := []int{0, 1, 2, 1, 0, 2, 2, 1}
	env, err := parity.TensorEnv(m, 1, rows(3), 3, []parity.TensorClient{{Pixels: px, Labels: labels}}, train.Options{Epochs: 1, Batch: N, LR: 0.1}, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	sec := Method{}.DefaultConfig().(*Settings)
	sec.Dropout = 0
	plan, err := Method{}.Build(env, sec)
	if err != nil {
		t.Fatal(err)
	}
	c := plan.Clients[0].(*client.Client)
	for _, name := range slices.Sorted(maps.Keys(c.P)) {
		v := c.P[name]
		for i := range v.Data {
			v.Data[i] = float32(r.NormFloat64())
		}
	}
	items := []int{0, 1, 2, 3, 4, 5, 6, 7}
	_, correct, err := c.Step(context.Background(), train.Batch{Items: items, RNG: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	feats := records(t, env, items)
	sc, err := c.Scorer()
	if err != nil {
		t.Fatal(err)
	}
	logits, err := sc.Logits(0, feats, N)
	if err != nil {
		t.Fatal(err)
	}
	hits := 0
	for b, y := range labels {
		best := 0
		for k := 1; k < 3; k++ {
			if logits[b*3+k] > logits[b*3+best] {
				best = k
			}
		}
		if best == y {
			hits++
		}
	}
	if hits == 0 || hits == N || 2*hits == N {
		t.Fatalf("%d of %d right: the case cannot test the count (none, all or half)", hits, N)
	}
	if correct != hits {
		t.Errorf("Step counts %d correct, the scorer's argmax %d", correct, hits)
	}
}

// TestReceiveNothing: under aggregate: product a site that receives no
// tensors keeps its LoRA (it restarts from the initial factors only on
// installing an average).
func TestReceiveNothing(t *testing.T) {
	env, err := parity.TensorEnv(tinyModel(4), 1, rows(3), 3, []parity.TensorClient{{Pixels: make([]float32, 2*3*8*8), Labels: []int{0, 1}}}, train.Options{Epochs: 1, Batch: 2, LR: 0.1}, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	sec := Method{}.DefaultConfig().(*Settings)
	sec.Aggregate = AggregateProduct
	plan, err := Method{}.Build(env, sec)
	if err != nil {
		t.Fatal(err)
	}
	c := plan.Clients[0].(*client.Client)
	for _, v := range c.P {
		for i := range v.Data {
			v.Data[i] += 0.5
		}
	}
	before := c.P.Clone()
	if err := c.Site.(*site).Receive(tensor.Named{}); err != nil {
		t.Fatal(err)
	}
	for name, v := range before {
		for i := range v.Data {
			if c.P[name].Data[i] != v.Data[i] {
				t.Fatalf("%s[%d] = %v after receiving nothing, was %v", name, i, c.P[name].Data[i], v.Data[i])
			}
		}
	}
}

// TestSettingsFrom: a fixture's settings as parity's table reads them for
// clip_lora — the rank from the A factors' one first dimension, alpha,
// dropout (0 when absent) and scale from the metadata, aggregate product
// when a delta is present — and its refusals, each naming the key or the
// parameter.
func TestSettingsFrom(t *testing.T) {
	m := tinyModel(4)
	fs, ok := parity.SettingsOf(Method{})
	st, ok2 := parity.StepperOf(Method{})
	if !ok || !ok2 {
		t.Fatal("parity reads no clip_lora step or settings")
	}
	params := func() tensor.Named {
		l := New(m, &Settings{Rank: 3, Alpha: 1, Scale: "sqrt"}, rand.New(rand.NewPCG(1, 1)))
		return l.Params
	}
	sec, err := fs.SettingsFrom(&parity.Fixture{Model: m, Params: params(), Meta: map[string]string{"alpha": "2", "scale": "linear"}})
	if err != nil {
		t.Fatal(err)
	}
	s := sec.(*Settings)
	if s.Rank != 3 || s.Alpha != 2 || s.Scale != "linear" || s.Dropout != 0 || s.Aggregate != AggregateAB {
		t.Errorf("settings %+v, want rank 3, alpha 2, linear, dropout 0, ab", s)
	}
	if got := s.scale(); got != 2.0/3 {
		t.Errorf("linear scale %v, want α/r = 2/3", got)
	}
	if got := (&Settings{Rank: 4, Alpha: 2, Scale: "sqrt"}).scale(); got != 1 {
		t.Errorf("sqrt scale %v, want α/√r = 1", got)
	}
	p := params()
	p[DeltaName("visual", 0, "q")] = tensor.New(8, 8)
	if sec, err := fs.SettingsFrom(&parity.Fixture{Model: m, Params: p, Meta: map[string]string{"dropout": "0.5"}}); err != nil ||
		sec.(*Settings).Aggregate != AggregateProduct || sec.(*Settings).Dropout != 0.5 {
		t.Errorf("with a delta and dropout 0.5: %+v, %v; want aggregate product, dropout 0.5", sec, err)
	}
	for _, tc := range []struct {
		mod  func(tensor.Named, map[string]string)
		want string
	}{
		{func(p tensor.Named, _ map[string]string) { p[Name("text", 1, "v", "A")] = tensor.New(2, 8) }, "with one value"},
		{func(p tensor.Named, _ map[string]string) { p[Name("text", 1, "v", "A")] = tensor.New(24) }, "with one value"},
		{func(p tensor.Named, _ map[string]string) {
			for name := range p {
				if strings.HasSuffix(name, ".A") {
					delete(p, name)
				}
			}
		}, "no parameter lora.*.A"},
		{func(_ tensor.Named, m map[string]string) { m["alpha"] = "x" }, "alpha"},
		{func(_ tensor.Named, m map[string]string) { m["dropout"] = "x" }, "dropout"},
		{func(_ tensor.Named, m map[string]string) { m["scale"] = "cube" }, "clip_lora.scale"},
	} {
		p, meta := params(), map[string]string{}
		tc.mod(p, meta)
		if _, err := fs.SettingsFrom(&parity.Fixture{Model: m, Params: p, Meta: meta}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %q", err, tc.want)
		}
		if _, err := st.Step(context.Background(), &parity.Fixture{Model: m, Params: p, Meta: meta}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("step: error %v, want one naming %q", err, tc.want)
		}
	}
}

// TestPredictorMatchesScorer: the predictor (the saved LoRA on the whole
// model, from pixels and class names) gives the evaluation scorer's logits
// (the same LoRA from the cached block-1 prefixes and prompt rows), for a
// site of each aggregate; a saved site lacking a factor is refused naming
// it.
func TestPredictorMatchesScorer(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	classes := []string{"red_circle", "blue square", "green striped triangle"}
	pe := methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}
	tokens, err := pe.Tokens(classes)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(2, 9))
	S := m.W.Config.Vision.ImageSize
	const B = 3
	px := make([]float32, B*3*S*S)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	env, err := parity.TensorEnv(m, 1, tokens, 3, []parity.TensorClient{{Pixels: px, Labels: []int{0, 1, 2}}}, train.Options{Epochs: 1, Batch: B, LR: 0.1}, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	for _, agg := range []string{AggregateAB, AggregateProduct} {
		sec := Method{}.DefaultConfig().(*Settings)
		sec.Aggregate = agg
		plan, err := Method{}.Build(env, sec)
		if err != nil {
			t.Fatal(err)
		}
		c := plan.Clients[0].(*client.Client)
		for _, ps := range []tensor.Named{c.P, c.Site.(*site).lora.Deltas} {
			for _, name := range slices.Sorted(maps.Keys(ps)) {
				for i := range ps[name].Data {
					ps[name].Data[i] = float32(r.NormFloat64() * 0.05)
				}
			}
		}
		sc, err := c.Scorer()
		if err != nil {
			t.Fatal(err)
		}
		want, err := sc.Logits(0, records(t, env, []int{0, 1, 2}), B)
		if err != nil {
			t.Fatal(err)
		}
		want = append([]float32(nil), want...)
		saved, err := plan.Site(0)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := Method{}.Predictor(pe, sec, saved)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pr.Logits(px, B, classes)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d logits, want %d", agg, len(got), len(want))
		}
		for i := range want {
			if math.Abs(float64(got[i]-want[i])) > 1e-3*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s: logit %d = %v, the scorer's %v", agg, i, got[i], want[i])
			}
		}
		delete(saved, Name("text", 0, "k", "B"))
		if _, err := (Method{}).Predictor(pe, sec, saved); err == nil || !strings.Contains(err.Error(), Name("text", 0, "k", "B")) {
			t.Errorf("%s: saved site without a factor: error %v", agg, err)
		}
	}
}

// records loads the cached prefixes of the first client's training items
// (the one view each of a parity.TensorEnv) as a training step reads them.
func records(t *testing.T, env *methods.Env, items []int) []float32 {
	t.Helper()
	var w methods.Workspace
	if err := env.LoadBatch(&w, &env.Task.Clients[0], items, rand.New(rand.NewPCG(1, 1)), 0, 0); err != nil {
		t.Fatal(err)
	}
	return w.Buf[:len(items)*env.Prefixer.RecordLen()]
}

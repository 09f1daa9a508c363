package fedpha

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

const td = "../../testdata/fedpha/"

// tolFor is paritytest.Tol with the next round's parameters (next.*)
// among the trained outputs.
func tolFor(name string) float64 {
	if strings.Contains(name, "next.") {
		return 1e-4
	}
	return paritytest.Tol(name)
}

// TestStepFixtures reproduces step (init) and step_far (init_far, where the
// SVD derivative matters): every forward tensor, the loss terms, both
// gradients, the step and its update.
func TestStepFixtures(t *testing.T) {
	m := paritytest.Model(t)
	for _, c := range []struct{ init, step string }{{"init", "step"}, {"init_far", "step_far"}} {
		t.Run(c.step, func(t *testing.T) {
			init, _ := paritytest.Read(t, td+c.init+".safetensors")
			ref, meta := paritytest.Read(t, td+c.step+".safetensors")
			out, err := StepFromFile(m, init, ref, meta)
			if err != nil {
				t.Fatal(err)
			}
			names := []string{"image_features", "text_features", "text_features_global", "text_features_projected",
				"global_singular_values", "projector", "ctx_local_projected", "logits", "logits_global", "text_distance",
				"loss_ce", "loss_ce_global", "loss_pull", "loss_push", "loss"}
			for _, p := range []string{ParamGlobal, ParamLocal} {
				names = append(names, "grad."+p, "step1."+p)
			}
			for _, name := range names {
				g, ok := out[name]
				if !ok {
					t.Fatalf("no %s", name)
				}
				if !tensor.SameShape(g.Shape, ref[name].Shape) {
					t.Errorf("%s: shape %v, want %v", name, g.Shape, ref[name].Shape)
				}
				paritytest.RelValues(t, name, g.Data, ref[name].Data, tolFor(name))
			}
			for _, p := range []string{ParamGlobal, ParamLocal} {
				paritytest.RelValues(t, p+" update", paritytest.UpdateValues(out["step1."+p].Data, init[p].Data), paritytest.UpdateValues(ref["step1."+p].Data, init[p].Data), 1e-4)
			}
		})
	}
}

// TestProjectionGrad: finite differences of ⟨P(A), R⟩ with respect to A
// for several cut-offs (none, some, all of the row space kept), in a
// regime where float32 rounding of P is far below the differences.
func TestProjectionGrad(t *testing.T) {
	const n, D = 4, 7
	for _, ratio := range []float64{1, 0.5, 0.8, 0.3} {
		rng := rand.New(rand.NewPCG(11, uint64(ratio*10)))
		a := gradcheck.Rand(rng, n*D, 1)
		r := gradcheck.Rand(rng, D*D, 1)
		p := Projection{Ratio: ratio}
		loss := func() float64 {
			P, err := p.Forward(a, n, D)
			if err != nil {
				t.Fatal(err)
			}
			return gradcheck.Dot(P, r)
		}
		loss()
		grad := make([]float32, n*D)
		if err := p.Backward(grad, r); err != nil {
			t.Fatal(err)
		}
		if err := gradcheck.Check("A", a, grad, loss, 2e-3, 1e-2, n*D, rng); err != nil {
			t.Errorf("ratio %v (cutoff %d): %v", ratio, Cutoff(n, ratio), err)
		}
		// P is a projector of rank k − cutoff: P² = P, trace = rank
		P, _ := p.Forward(a, n, D)
		var tr float64
		for i := 0; i < D; i++ {
			tr += float64(P[i*D+i])
			for j := 0; j < D; j++ {
				var pp float64
				for k := 0; k < D; k++ {
					pp += float64(P[i*D+k]) * float64(P[k*D+j])
				}
				if math.Abs(pp-float64(P[i*D+j])) > 1e-5 {
					t.Fatalf("ratio %v: P² ≠ P at [%d,%d]", ratio, i, j)
				}
			}
		}
		if want := n - Cutoff(n, ratio); math.Abs(tr-float64(want)) > 1e-5 {
			t.Errorf("ratio %v: trace P = %v, want rank %d", ratio, tr, want)
		}
	}
}

// TestCutoff: Python's int() of the float product, as the reference.
func TestCutoff(t *testing.T) {
	for _, c := range []struct {
		k     int
		ratio float64
		want  int
	}{{16, 0.8, 3}, {8, 0.8, 1}, {4, 0.8, 0}, {8, 1, 0}, {8, 0, 8}} {
		if got := Cutoff(c.k, c.ratio); got != c.want {
			t.Errorf("Cutoff(%d, %v) = %d, want %d", c.k, c.ratio, got, c.want)
		}
	}
}

// randomModel is a 2-block text tower (context 12) with embeddings scaled up
// so the blocks work away from their linear regime; tokens are C rows
// "SOT X… c… . EOT".
func randomModel(C, nCtx int) (*clip.Model, []int) {
	return methodtest.TinyCLIP{EmbedDim: 6, VisionLayers: 1, TextLayers: 2, EmbScale: 50}.Prompts(C, nCtx)
}

// TestGradCheck: finite differences of the whole loss (both cross
// entropies, pull, push, and the SVD projection) in both contexts, with a
// cut-off that drops a singular direction and every term active.
func TestGradCheck(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Ratio: 0.5, Alpha: 1.9, LambdaPull: 3, LambdaPush: 1, InitStd: 2, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	img := gradcheck.Rand(rng, 5*6, 1)
	labels := []int{0, 3, 1, 2, 1}
	loss := func() float64 {
		v, _, _, err := l.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	_, terms, _, err := l.Step(img, labels)
	if err != nil {
		t.Fatal(err)
	}
	if Cutoff(3, 0.5) != 1 || terms["loss_pull"] <= 1e-3 || terms["loss_push"] <= 1e-3 {
		t.Fatalf("terms %v: want every term active", terms)
	}
	for c := range l.C {
		if d := float64(l.dist[c]); math.Abs(d-1.9) < 0.05 {
			t.Fatalf("class %d: distance %v at the push hinge", c, d)
		}
	}
	grads := l.Grads().Clone()
	for name, p := range l.Params() {
		if err := gradcheck.Check(name, p.Data, grads[name].Data, loss, 1e-2, 2e-2, 24, rng); err != nil {
			t.Error(err)
		}
	}
}

// TestConfig: missing and bad settings are named.
func TestConfig(t *testing.T) {
	if c, err := ConfigFromMeta(map[string]string{"n_ctx": "4", "ratio": "0.5", "alpha": "2"}); err != nil || c.Alpha != 2 || c.LambdaPull != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	for _, tc := range []struct {
		meta map[string]string
		want string
	}{
		{map[string]string{"ratio": "0.8"}, "n_ctx"},
		{map[string]string{"n_ctx": "8"}, "ratio"},
		{map[string]string{"n_ctx": "8", "ratio": "1.5"}, "ratio"},
		{map[string]string{"n_ctx": "8", "ratio": "0.8", "alpha": "-1"}, "alpha"},
		{map[string]string{"n_ctx": "8", "ratio": "0.8", "num_prompt": "2"}, "num_prompt"},
	} {
		if _, err := ConfigFromMeta(tc.meta); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.meta, err, tc.want)
		}
	}
}

// TestWeightDecay checks the decay on its own (the fixtures barely see it):
// a step with weight decay wd differs from the step without by exactly
// −lr·wd·p in both contexts.
func TestWeightDecay(t *testing.T) {
	paritytest.WeightDecay(t, td, StepFromFile, ParamGlobal, ParamLocal)
}

package maple

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
)

// randomModel is a 3-block CLIP (text context 12, 5 image tokens) with
// embeddings scaled up so the blocks work away from their linear regime;
// tokens are C rows "SOT X… c… . EOT" with 1..3 class tokens.
func randomModel(C, nCtx int) (*clip.Model, []int) {
	return methodtest.TinyCLIP{EmbedDim: 6, VisionLayers: 3, TextLayers: 3, EmbScale: 50}.Prompts(C, nCtx)
}

// TestGradCheck compares every prompt-learner tensor's gradient — the
// embedding-level prompts, the deep prompts of each block and each
// coupling — with central finite differences, at every prompt depth of a
// 3-block model (J = 1: shallow; J = 3: every block prompted).
func TestGradCheck(t *testing.T) {
	for J := 1; J <= 3; J++ {
		m, tokens := randomModel(4, 2)
		l, err := New(m, tokens, Config{NCtx: 2, Depth: J, InitStd: 1, Seed: uint64(J)})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(2, uint64(J)))
		for _, name := range slices.Sorted(maps.Keys(l.Params())) { // away from the small init
			p := l.Params()[name]
			for i := range p.Data {
				p.Data[i] += float32(rng.NormFloat64() * 0.5)
			}
		}
		B := 5
		prefix := gradcheck.Rand(rng, B*l.T0*l.Dv, 1.5)
		labels := []int{0, 3, 1, 2, 1}
		loss := func() float64 {
			v, _, _, err := l.Step(prefix, labels)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		loss()
		want := 3 + 3*(J-1)
		if len(l.Params()) != want {
			t.Fatalf("J %d: %d tensors, want %d", J, len(l.Params()), want)
		}
		grads := map[string][]float32{}
		for name, g := range l.Grads() {
			grads[name] = slices.Clone(g.Data)
			nz := false
			for _, v := range g.Data {
				nz = nz || v != 0
			}
			if !nz {
				t.Errorf("J %d: gradient of %s is zero", J, name)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(l.Params())) {
			p := l.Params()[name]
			if err := directional(p.Data, grads[name], loss, rng); err != nil {
				t.Errorf("J %d %s: %v", J, name, err)
			}
		}
	}
}

// directional compares g·d with the central difference of the loss along
// directions d of the whole tensor: d = g/max|g| (the steepest one), then
// two random ±1 directions. The error is relative to |numeric| + 1%·Σ|g_i|
// (the size g·d could have), so a random direction that nearly cancels is
// not judged by float32 rounding of the loss alone; 3% leaves room for that
// rounding (about 1e-6 of the loss, over 2ε) where g·d is small. Exactness
// is checked by the fixtures (1e-4 against the authors' gradients).
func directional(p, g []float32, loss func() float64, rng *rand.Rand) error {
	const eps = 1e-2
	var gmax, gsum float64
	for _, v := range g {
		gmax = math.Max(gmax, math.Abs(float64(v)))
		gsum += math.Abs(float64(v))
	}
	if gmax == 0 {
		return fmt.Errorf("gradient is zero")
	}
	for k := 0; k < 3; k++ {
		d := make([]float32, len(p))
		var ana float64
		for i := range d {
			if k == 0 {
				d[i] = float32(float64(g[i]) / gmax)
			} else {
				d[i] = float32(2*rng.IntN(2) - 1)
			}
			ana += float64(d[i]) * float64(g[i])
		}
		shift := func(s float32) {
			for i := range p {
				p[i] += s * d[i]
			}
		}
		shift(eps)
		lp := loss()
		shift(-2 * eps)
		lm := loss()
		shift(eps)
		num := (lp - lm) / (2 * eps)
		if e := math.Abs(num-ana) / (math.Abs(num) + 1e-2*gsum); e > 3e-2 {
			return fmt.Errorf("direction %d: numeric %.6g vs analytic %.6g (relative error %.3g > 0.03)", k, num, ana, e)
		}
	}
	return nil
}

// TestDeepPromptsChangeFeatures checks a deep text prompt reaches the text
// features (it is inserted, not ignored).
func TestDeepPromptsChangeFeatures(t *testing.T) {
	m, tokens := randomModel(3, 2)
	l, err := New(m, tokens, Config{NCtx: 2, Depth: 2, InitStd: 1, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	l.Couple()
	before := slices.Clone(l.TextFeatures(false))
	l.Params()[ParamText(1)].Data[0] += 1
	l.Couple()
	after := l.TextFeatures(false)
	if slices.Equal(before, after) {
		t.Error("changing the deep text prompt of block 1 left the text features unchanged")
	}
}

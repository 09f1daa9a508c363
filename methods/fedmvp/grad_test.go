package fedmvp

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// randomModel is a 2-block CLIP (8×8 images of 4×4 patches: 4 patches,
// width 8, features 6) with scaled-up weights so the blocks work away from
// their linear regime.
func randomModel() *clip.Model {
	cfg := clip.Config{EmbedDim: 6,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 12, VocabSize: 20, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	return clip.New(clip.Random(cfg, 3))
}

// randomLearner builds a learner over C = 3 classes with 2, 1 and 3
// description rows of random features, its tensors moved away from their
// small initial values.
func randomLearner(t *testing.T, cfg Config, seed uint64) (*Learner, *rand.Rand) {
	t.Helper()
	m := randomModel()
	rng := rand.New(rand.NewPCG(seed, 7))
	rows := []int{0, 1, 0, 2, 2, 2}
	l, err := New(m, gradcheck.Rand(rng, len(rows)*6, 1), rows, 3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(l.Params())) {
		p := l.Params()[name]
		for i := range p.Data {
			p.Data[i] += float32(rng.NormFloat64() * 0.3)
		}
	}
	return l, rng
}

// TestGradCheck compares every trained tensor's gradient with central
// finite differences of the loss, before the LoRA switch (cross-attention
// and linear map trained) and after it (LoRA factors and linear map), with
// either consistency target, on uneven pooling bins (4 patches into 3
// prompts); the tensors a mode freezes must get no gradient, and β of the
// keys' LayerNorm none (softmax ignores a common shift of the keys).
func TestGradCheck(t *testing.T) {
	for _, lora := range []bool{false, true} {
		for _, flip := range []bool{false, true} {
			t.Run(fmt.Sprintf("lora=%v/flip=%v", lora, flip), func(t *testing.T) {
				l, rng := randomLearner(t, Config{Alpha: 2, Heads: 2, Rank: 2, Prompts: 3, Seed: 4}, 11)
				l.LoRA, l.Flip = lora, flip
				B := 4
				rec := gradcheck.Rand(rng, B*l.RecordLen(), 1.5)
				labels := []int{0, 2, 1, 2}
				loss := func() float64 {
					v, _, _, err := l.Step(rec, labels)
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
				loss()
				grads := map[string][]float32{}
				for name, g := range l.Grads() {
					grads[name] = slices.Clone(g.Data)
				}
				for _, name := range slices.Sorted(maps.Keys(l.Params())) {
					nz := slices.ContainsFunc(grads[name], func(v float32) bool { return v != 0 })
					if !Trained(name, lora) {
						if nz {
							t.Errorf("%s: frozen in this mode but has a gradient", name)
						}
						continue
					}
					if name == ParamNormKB {
						// β of the keys' LayerNorm shifts every key by the
						// same vector: softmax is invariant, the gradient 0
						if m := slices.Max(absAll(grads[name])); m > 1e-5*slices.Max(absAll(grads[ParamNormKW])) {
							t.Errorf("%s: gradient %g, want ≈ 0 (every key shifts alike)", name, m)
						}
						continue
					}
					if err := directional(l.Params()[name].Data, grads[name], loss, rng); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			})
		}
	}
}

// directional compares g·d with the central difference of the loss along
// directions d of the whole tensor: d = g/max|g|, then two random ±1
// directions; the error is relative to |numeric| + 1%·Σ|g_i| (float32
// rounding of the loss over 2ε). Exactness is checked against the
// authors' code by the fixtures.
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

func absAll(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(math.Abs(float64(x)))
	}
	return out
}

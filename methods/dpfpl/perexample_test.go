package dpfpl

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
)

// zeroNoise draws Ω from a generator and zeros for the noise, recording
// each noise draw's name and standard deviation.
type zeroNoise struct {
	rng  *rand.Rand
	what []string
	std  []float64
}

func (z *zeroNoise) Gaussian(dst []float32, std float64, what string) error {
	if what == "omega" {
		for i := range dst {
			dst[i] = float32(z.rng.NormFloat64() * std)
		}
		return nil
	}
	clear(dst)
	z.what, z.std = append(z.what, what), append(z.std, std)
	return nil
}

// TestPerExampleDP: with per_example_dp the three gradients are DP-SGD's —
// Σ_i clip_C(x_i)/B' for x_i each example's gradient of the context, its
// gU = x_i·Vᵀ and its gV = Uᵀ·x_i (B' = 8, the noise's batch, for 6
// examples), plus N(0, s²) on each, the global one too. The oracle runs one
// forward and backward per example on its own (a batch of one: ∂loss_i/∂ctx
// by another path than the learner's per-example backward), multiplies and
// clips in float64 here; C is the median example norm, so some examples
// are clipped and some not.
func TestPerExampleDP(t *testing.T) {
	m := paritytest.Model(t)
	batch, _, err := prompt.ReadFile(paritytest.Testdata + "dpfpl/step.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := prompt.Ints(batch, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		t.Fatal(err)
	}
	img, B, err := prompt.ImageFeatures(m, batch, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.NCtx, cfg.Rank, cfg.Seed = 4, 2, 5
	// the oracle: each example alone
	var xs [][]float32
	var norms []float64
	for i := range B {
		one, err := New(m, tokens, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := one.Step(img[i*one.E:(i+1)*one.E], labels[i:i+1]); err != nil {
			t.Fatal(err)
		}
		xs = append(xs, slices.Clone(one.g))
		norms = append(norms, norm(one.g))
	}
	sorted := slices.Sorted(slices.Values(norms))
	cfg.ClipNorm = (sorted[B/2-1] + sorted[B/2]) / 2
	cfg.NoiseStd, cfg.PerExampleDP, cfg.DPBatch = 0.5, true, 8

	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Step(img, labels); err != nil {
		t.Fatal(err)
	}
	src := &zeroNoise{rng: rand.New(rand.NewPCG(1, 2))}
	if err := l.Privatize(src); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(src.what, []string{"noise_g", "noise_u", "noise_v"}) || !slices.Equal(src.std, []float64{0.5, 0.5, 0.5}) {
		t.Errorf("noise draws %v at %v, want noise_g, noise_u, noise_v at s = 0.5", src.what, src.std)
	}
	n, r, D := cfg.NCtx, cfg.Rank, l.D
	wantG, wantU, wantV := make([]float64, n*D), make([]float64, n*r), make([]float64, r*D)
	add := func(dst, x []float64) {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		scale := math.Min(1, cfg.ClipNorm/math.Sqrt(ss)) / 8
		for i, v := range x {
			dst[i] += scale * v
		}
	}
	for _, x := range xs {
		g, gu, gv := make([]float64, n*D), make([]float64, n*r), make([]float64, r*D)
		for i := range n {
			for d := range D {
				g[i*D+d] = float64(x[i*D+d])
				for k := range r {
					gu[i*r+k] += float64(x[i*D+d]) * float64(l.V[k*D+d])
					gv[k*D+d] += float64(l.U[i*r+k]) * float64(x[i*D+d])
				}
			}
		}
		add(wantG, g)
		add(wantU, gu)
		add(wantV, gv)
	}
	for _, c := range []struct {
		name string
		got  []float32
		want []float64
	}{{"global", l.gGlobal.Data, wantG}, {"gU", l.GU, wantU}, {"gV", l.GV, wantV}} {
		var worst, scale float64
		for i, w := range c.want {
			worst, scale = math.Max(worst, math.Abs(float64(c.got[i])-w)), math.Max(scale, math.Abs(w))
		}
		if !(worst <= 1e-4*scale) || scale == 0 {
			t.Errorf("%s: off by %g (scale %g), want per-example clipped sums over 8", c.name, worst, scale)
		}
	}
}

// TestPerExampleDPAccounting: a site running DP-SGD releases three
// Gaussians a step at multiplier σ (sensitivity C/B as calibrated), and
// counts nothing for the server's noise (post-processing of its noised
// upload): after one round of 2 batches, local 4, global 2, total 6.
func TestPerExampleDPAccounting(t *testing.T) {
	s := smallSettings()
	s.PerExampleDP = true
	plan, _ := smallPlan(t, s)
	if err := plan.Strategy.Init([]federation.ClientInfo{{ID: 0, NumExamples: 8}, {ID: 1, NumExamples: 4}}); err != nil {
		t.Fatal(err)
	}
	res, err := plan.Clients[0].Fit(context.Background(), federation.FitIns{Round: 0, Params: plan.Global()})
	if err != nil {
		t.Fatal(err)
	}
	sigma := s.Sigma()
	want := map[string]float64{
		"dp_epsilon_local":  epsAt(t, sigma, 4, s.Delta),
		"dp_epsilon_global": epsAt(t, sigma, 2, s.Delta),
		"dp_epsilon_total":  epsAt(t, sigma, 6, s.Delta),
	}
	for k, w := range want {
		if !near(res.Metrics[k], w) {
			t.Errorf("%s = %g, want %g", k, res.Metrics[k], w)
		}
	}
	for _, k := range []string{"dp_epsilon_local_batch_clip", "dp_epsilon_global_batch_clip"} {
		if _, ok := res.Metrics[k]; ok {
			t.Errorf("%s reported under per-example clipping", k)
		}
	}
}

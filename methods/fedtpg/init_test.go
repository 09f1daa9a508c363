package fedtpg

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestInitParams checks the draw against torch's initialisation of each
// module, with bounds computed here from the shapes: soft_prompt
// N(0, std²) (sample standard deviation within 30%); LayerNorm weights 1,
// every bias of LayerNorm and attention 0; the attention projections
// Xavier-uniform U(±√(6/(out+in))); out_proj and the feed-forward Linears
// U(±1/√in) for weight and bias. Every uniform tensor of at least 64 values
// stays inside its bound and reaches past 0.7 of it on both sides. The
// cross-attention's context (D = 12) is narrower than the queries (E = 16),
// so its q/k/v projections are separate; the self-attention's are one
// in_proj_weight.
func TestInitParams(t *testing.T) {
	c := GenConfig{NCtx: 8, DCtx: 1, Depth: 1, CrossHeads: 4, SelfHeads: 2, FFMult: 2, E: 16, D: 12}
	const std = 0.02
	p := c.InitParams(std, rand.New(rand.NewPCG(3, 4)))
	if len(p) != len(c.Shapes()) {
		t.Fatalf("%d tensors, want %d", len(p), len(c.Shapes()))
	}
	uniform := func(name string, d []float32, bound float64) {
		lo, hi := float64(slices.Min(d)), float64(slices.Max(d))
		if lo < -bound || hi > bound {
			t.Errorf("%s: values in [%g, %g], outside U(±%g)", name, lo, hi, bound)
		}
		if len(d) >= 64 && (lo > -0.7*bound || hi < 0.7*bound) {
			t.Errorf("%s: values in [%g, %g], not spread over U(±%g)", name, lo, hi, bound)
		}
	}
	constant := func(name string, d []float32, v float32) {
		for i, x := range d {
			if x != v {
				t.Fatalf("%s[%d] = %g, want %g", name, i, x, v)
			}
		}
	}
	for name, tt := range p {
		short := strings.TrimPrefix(name, Prefix)
		d, shape := tt.Data, tt.Shape
		switch {
		case short == "soft_prompt":
			var ss float64
			for _, v := range d {
				ss += float64(v) * float64(v)
			}
			if sd := math.Sqrt(ss / float64(len(d))); math.Abs(sd-std) > 0.3*std {
				t.Errorf("soft_prompt: standard deviation %g, want %g", sd, std)
			}
		case strings.HasSuffix(short, "norm.weight"), strings.HasSuffix(short, "norm_context.weight"), strings.HasSuffix(short, "net.0.weight"):
			constant(name, d, 1)
		case strings.HasSuffix(short, "_proj_weight"):
			uniform(name, d, math.Sqrt(6/float64(shape[0]+shape[1])))
		case strings.HasSuffix(short, "out_proj.weight"), strings.HasSuffix(short, "net.1.weight"), strings.HasSuffix(short, "net.3.weight"):
			uniform(name, d, 1/math.Sqrt(float64(shape[1])))
		case strings.HasSuffix(short, "net.1.bias"):
			uniform(name, d, 1/math.Sqrt(float64(c.E)))
		case strings.HasSuffix(short, "net.3.bias"):
			uniform(name, d, 1/math.Sqrt(float64(c.FFMult*c.E)))
		case strings.HasSuffix(short, "bias"):
			constant(name, d, 0)
		default:
			t.Errorf("%s: no rule", name)
		}
	}
	for _, name := range []string{nameCross + "fn.q_proj_weight", nameCross + "fn.k_proj_weight", selfName(0) + "0.fn.in_proj_weight"} {
		if _, ok := p[Prefix+name]; !ok {
			t.Errorf("no %s", name)
		}
	}
}

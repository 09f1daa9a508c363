package fedclip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/tensor"
)

// oracleAdapt is FedCLIP's adapter in float64 from its definition
// (img_adap = Linear, Tanh, Linear, Softmax(dim=1), then the gate):
// g = softmax(tanh(f W1ᵀ + b1) W2ᵀ + b2) ⊙ f.
func oracleAdapt(p tensor.Named, f []float32, B, d int) []float64 {
	w1, b1, w2, b2 := p[ParamW1].Data, p[ParamB1].Data, p[ParamW2].Data, p[ParamB2].Data
	g := make([]float64, B*d)
	for b := 0; b < B; b++ {
		h := make([]float64, d)
		for j := range h {
			s := float64(b1[j])
			for i := 0; i < d; i++ {
				s += float64(f[b*d+i]) * float64(w1[j*d+i])
			}
			h[j] = math.Tanh(s)
		}
		z := make([]float64, d)
		mx := math.Inf(-1)
		for j := range z {
			z[j] = float64(b2[j])
			for i := 0; i < d; i++ {
				z[j] += h[i] * float64(w2[j*d+i])
			}
			mx = math.Max(mx, z[j])
		}
		var sum float64
		for j := range z {
			z[j] = math.Exp(z[j] - mx)
			sum += z[j]
		}
		for j := range z {
			g[b*d+j] = z[j] / sum * float64(f[b*d+j])
		}
	}
	return g
}

// TestSoftmaxLargeInputs: the attention's softmax of rows with large
// entries (e^{120} overflows float32) is the float64 softmax.
func TestSoftmaxLargeInputs(t *testing.T) {
	in := []float32{60, 50, -10, 0, 45, 59.5}
	out := make([]float32, len(in))
	SoftmaxForward(out, in, 2, 3)
	for b := 0; b < 2; b++ {
		row := in[b*3 : b*3+3]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		for k, v := range row {
			want := math.Exp(float64(v)-mx) / sum
			if got := float64(out[b*3+k]); !(math.Abs(got-want) <= 1e-6) {
				t.Errorf("softmax row %d [%d] = %v, want %v", b, k, got, want)
			}
		}
	}
}

// TestAdaptLogitsCorrect: Adapt gives the float64 adapter's B·d features,
// Logits exp(logit_scale)·cos(g, t_c) of them, and Step counts the images
// whose oracle argmax is the label (B odd, so the count differs from
// B − count).
func TestAdaptLogitsCorrect(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	const B, C, d = 9, 4, 12
	p := Init(d, rng)
	for _, n := range []string{ParamW1, ParamW2} {
		for i := range p[n].Data {
			p[n].Data[i] *= 4
		}
	}
	scale := math.Log(20)
	m := newModel(d, float32(scale))
	f, txt := gradcheck.Rand(rng, B*d, 1), gradcheck.Rand(rng, C*d, 1)
	labels := make([]int, B)
	for b := range labels {
		labels[b] = (b * 3) % C
		for i := 0; i < d; i++ { // lean some images towards their class
			if b%2 == 0 {
				f[b*d+i] += txt[labels[b]*d+i]
			}
		}
	}
	wantG := oracleAdapt(p, f, B, d)
	g := m.Adapt(p, f, B)
	if len(g) != B*d {
		t.Fatalf("Adapt: %d values, want %d", len(g), B*d)
	}
	for i, v := range g {
		if math.Abs(float64(v)-wantG[i]) > 1e-5*(1+math.Abs(wantG[i])) {
			t.Fatalf("Adapt[%d] = %v, oracle %v", i, v, wantG[i])
		}
	}
	logits := m.Logits(p, f, B, txt)
	hits := 0
	for b := 0; b < B; b++ {
		var gg float64
		for i := 0; i < d; i++ {
			gg += wantG[b*d+i] * wantG[b*d+i]
		}
		best, bestV := 0, math.Inf(-1)
		for c := 0; c < C; c++ {
			var gt, tt float64
			for i := 0; i < d; i++ {
				gt += wantG[b*d+i] * float64(txt[c*d+i])
				tt += float64(txt[c*d+i]) * float64(txt[c*d+i])
			}
			want := math.Exp(scale) * gt / math.Sqrt(gg*tt)
			if got := float64(logits[b*C+c]); math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
				t.Fatalf("logit [%d, %d] = %v, oracle %v", b, c, got, want)
			}
			if want > bestV {
				best, bestV = c, want
			}
		}
		if best == labels[b] {
			hits++
		}
	}
	if hits == 0 || hits == B {
		t.Fatalf("oracle hits %d of %d: the case cannot test the count", hits, B)
	}
	if _, correct := m.Step(p, f, labels, txt); correct != hits {
		t.Errorf("Step counts %d correct, oracle %d", correct, hits)
	}
}

// TestSettingsLogitScaleBounds: a metadata logit_scale is accepted within
// 1e-6·(1 + |model's|) of the model's — at the bound exactly (model 0,
// metadata 1e-6), and 3e-6 off the tiny model's scale — and refused
// beyond.
func TestSettingsLogitScaleBounds(t *testing.T) {
	f := loadStep(t)
	ls := float64(f.Model.W.LogitScale)
	if math.Abs(ls) < 1 {
		t.Fatalf("the tiny model's logit_scale %v: the case needs |m| ≥ 1", ls)
	}
	for _, tc := range []struct {
		zero bool // the model's logit_scale set to 0
		meta float64
		ok   bool
	}{
		{true, 1e-6, true},
		{true, 1.5e-6, false},
		{false, ls + 3e-6, true},
		{false, ls - 3e-6, true},
		{false, ls + 1e-5*(1+math.Abs(ls)), false},
	} {
		f := loadStep(t, fmt.Sprintf("logit_scale=%v", tc.meta))
		if tc.zero {
			f.Model.W.LogitScale = 0
		}
		_, err := Method{}.SettingsFrom(f)
		if tc.ok && err != nil {
			t.Errorf("logit_scale %v (model %v): %v", tc.meta, f.Model.W.LogitScale, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "logit_scale")) {
			t.Errorf("logit_scale %v (model %v): error %v, want one naming logit_scale", tc.meta, f.Model.W.LogitScale, err)
		}
	}
}

package resnet

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/safetensors"
)

// relErr is max|Δ| / max|want| over the values.
func relErr(t *testing.T, name string, got []float32, want []float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var d, ref float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		ref = math.Max(ref, math.Abs(want[i]))
	}
	return d / ref
}

// tokens64 is the oracle: PLOT's AttentionPool2d.forward (plot-coop
// clip/model.py: F.multi_head_attention_forward with query = key = value =
// every token) restated in float64 from its PyTorch code, image-major
// [B, T, E].
func tokens64(e *Encoder, x []float32, B, C, H, W int) []float64 {
	T, HW, E, heads := H*W+1, H*W, e.Cfg.EmbedDim, e.Cfg.Heads
	dh := C / heads
	lin := func(in []float64, w, bias []float32, n, ic, oc int) []float64 {
		out := make([]float64, n*oc)
		for r := 0; r < n; r++ {
			for o := 0; o < oc; o++ {
				s := float64(bias[o])
				for i := 0; i < ic; i++ {
					s += in[r*ic+i] * float64(w[o*ic+i])
				}
				out[r*oc+o] = s
			}
		}
		return out
	}
	// x.reshape(N, C, HW).permute(2, 0, 1); cat([mean, x]); + positional_embedding
	tok := make([]float64, B*T*C)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			var mean float64
			for p := 0; p < HW; p++ {
				mean += float64(x[(b*C+c)*HW+p]) / float64(HW)
			}
			tok[(b*T)*C+c] = mean + float64(e.pos[c])
			for p := 0; p < HW; p++ {
				tok[(b*T+1+p)*C+c] = float64(x[(b*C+c)*HW+p]) + float64(e.pos[(1+p)*C+c])
			}
		}
	}
	q := lin(tok, e.qW, e.qB, B*T, C, C)
	k := lin(tok, e.kW, e.kB, B*T, C, C)
	v := lin(tok, e.vW, e.vB, B*T, C, C)
	att := make([]float64, B*T*C)
	for b := 0; b < B; b++ {
		for h := 0; h < heads; h++ {
			for i := 0; i < T; i++ {
				w := make([]float64, T)
				var z float64
				for j := 0; j < T; j++ {
					var s float64
					for d := 0; d < dh; d++ {
						// q is scaled by dh^-0.5 before the product, as in torch
						s += q[(b*T+i)*C+h*dh+d] / math.Sqrt(float64(dh)) * k[(b*T+j)*C+h*dh+d]
					}
					w[j] = math.Exp(s)
					z += w[j]
				}
				for d := 0; d < dh; d++ {
					var s float64
					for j := 0; j < T; j++ {
						s += w[j] / z * v[(b*T+j)*C+h*dh+d]
					}
					att[(b*T+i)*C+h*dh+d] = s
				}
			}
		}
	}
	return lin(att, e.cW, e.cB, B*T, C, E)
}

// TestAttnPoolTokensFloat64 runs the every-token pool on the authors'
// layer4 output (clip-rn-tiny forward.safetensors) and compares all T
// tokens with the float64 oracle, and token 0 with the authors' pooled
// image_features (their unmodified pool keeps token 0 alone).
func TestAttnPoolTokensFloat64(t *testing.T) {
	e, f := loadFixture(t)
	x4, err := f.Float32("layer4_out")
	if err != nil {
		t.Fatal(err)
	}
	B, C, H, W := x4.Shape[0], x4.Shape[1], x4.Shape[2], x4.Shape[3]
	T, E := H*W+1, e.Cfg.EmbedDim
	if e.Tokens() != T {
		t.Fatalf("Tokens() = %d, want %d", e.Tokens(), T)
	}
	out := make([]float32, B*T*E)
	e.AttnPoolTokens(out, x4.Data, B, C, H, W)
	if r := relErr(t, "tokens", out, tokens64(e, x4.Data, B, C, H, W)); !(r <= 1e-5) {
		t.Errorf("every-token pool: rel error %.3g against float64 > 1e-5", r)
	}
	want, err := f.Float32("image_features")
	if err != nil {
		t.Fatal(err)
	}
	tok0 := make([]float64, B*E)
	got0 := make([]float32, B*E)
	for b := 0; b < B; b++ {
		copy(got0[b*E:(b+1)*E], out[b*T*E:b*T*E+E])
		for i := 0; i < E; i++ {
			tok0[b*E+i] = float64(want.Data[b*E+i])
		}
	}
	if r := relErr(t, "token 0", got0, tok0); !(r <= 1e-5) {
		t.Errorf("token 0: rel error %.3g against the authors' image_features > 1e-5", r)
	}
}

// TestEncodeTokensPLOTFixture reproduces the every-token image features
// PLOT's own ModifiedResNet returned in its step fixture
// (testdata/plot/rn_step.safetensors "image_features" [1+M, b, E],
// token-major) from its images.
func TestEncodeTokensPLOTFixture(t *testing.T) {
	e, _ := loadFixture(t)
	f, err := safetensors.Open("../../testdata/plot/rn_step.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := f.Float32("images")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := f.Float32("image_features")
	if err != nil {
		t.Fatal(err)
	}
	B, T, E := img.Shape[0], e.Tokens(), e.Cfg.EmbedDim
	if ref.Shape[0] != T || ref.Shape[1] != B || ref.Shape[2] != E {
		t.Fatalf("image_features %v, want [%d %d %d]", ref.Shape, T, B, E)
	}
	out := make([]float32, B*T*E)
	e.EncodeTokens(out, img.Data, B)
	want := make([]float64, len(out)) // token-major → image-major
	for tk := 0; tk < T; tk++ {
		for b := 0; b < B; b++ {
			for i := 0; i < E; i++ {
				want[(b*T+tk)*E+i] = float64(ref.Data[(tk*B+b)*E+i])
			}
		}
	}
	if r := relErr(t, "image_features", out, want); !(r <= 1e-5) {
		t.Errorf("image_features: rel error %.3g against PLOT's > 1e-5", r)
	} else {
		t.Logf("image_features: rel %.2g", r)
	}
	pooled := make([]float32, B*E)
	e.Encode(pooled, img.Data, B)
	for b := 0; b < B; b++ {
		for i := 0; i < E; i++ {
			want[b*E+i] = float64(pooled[b*E+i])
		}
	}
	got0 := make([]float32, B*E)
	for b := 0; b < B; b++ {
		copy(got0[b*E:(b+1)*E], out[b*T*E:b*T*E+E])
	}
	if r := relErr(t, "token 0", got0, want[:B*E]); !(r <= 1e-6) {
		t.Errorf("token 0 differs from Encode's pooled feature by %.3g relative", r)
	}
}

// TestAttnPoolTokensRandom compares with the oracle on random weights with
// several heads and a non-square map (a wrong head split, scale or
// token order would show here as well as on the fixture's 4 heads).
func TestAttnPoolTokensRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	const B, C, H, W, E, heads = 2, 12, 2, 3, 5, 3
	T := H*W + 1
	e := &Encoder{Cfg: Config{Heads: heads, EmbedDim: E},
		pos: gradcheck.Rand(rng, T*C, 0.5),
		qW:  gradcheck.Rand(rng, C*C, 0.5), qB: gradcheck.Rand(rng, C, 0.2),
		kW: gradcheck.Rand(rng, C*C, 0.5), kB: gradcheck.Rand(rng, C, 0.2),
		vW: gradcheck.Rand(rng, C*C, 0.5), vB: gradcheck.Rand(rng, C, 0.2),
		cW: gradcheck.Rand(rng, E*C, 0.5), cB: gradcheck.Rand(rng, E, 0.2)}
	x := gradcheck.Rand(rng, B*C*H*W, 1)
	out := make([]float32, B*T*E)
	e.AttnPoolTokens(out, x, B, C, H, W)
	if r := relErr(t, "tokens", out, tokens64(e, x, B, C, H, W)); !(r <= 1e-5) {
		t.Errorf("rel error %.3g against float64 > 1e-5", r)
	}
}

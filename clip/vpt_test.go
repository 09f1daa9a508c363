package clip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// vptSetup is a random tiny model with L vision blocks, cached prefixes of
// B images and n random prompts.
func vptSetup(t *testing.T, L, n, B int) (*Model, []float32, []float32, *rand.Rand) {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, uint64(L)))
	c := tinyConfig()
	c.Vision.Layers = L
	w := Random(c, 5)
	randomizeLN(rng, w)
	m := New(w)
	S := c.Vision.ImageSize
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	x0 := ImagePrefix(m, 1, px, B, nil)
	return m, x0, gradcheck.Rand(rng, n*c.Vision.Width, 1), rng
}

// TestPromptedVisionForward: the features equal the model's own blocks run
// on [cls, prompts, patches], and q, k are the last block's in_proj of
// ln_1 of its input rows, computed here in float64.
func TestPromptedVisionForward(t *testing.T) {
	for _, L := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("layers=%d", L), func(t *testing.T) {
			const n, B = 3, 2
			m, x0, prompts, _ := vptSetup(t, L, n, B)
			pv, err := NewPromptedVision(m, n)
			if err != nil {
				t.Fatal(err)
			}
			feat, q, k, err := pv.Forward(x0, prompts, B, true)
			if err != nil {
				t.Fatal(err)
			}
			D, T0 := m.Vision.Cfg.Width, m.Vision.Cfg.Tokens()
			T := T0 + n
			x := make([]float32, 0, B*T*D)
			for b := 0; b < B; b++ {
				row := x0[b*T0*D : (b+1)*T0*D]
				x = append(x, row[:D]...)
				x = append(x, prompts...)
				x = append(x, row[D:]...)
			}
			v := m.Vision
			xl := append([]float32(nil), v.Stack.Forward(x, B, T, 0, L-1, nil, false)...)
			pooled := v.Stack.Forward(xl, B, T, L-1, L, ClassPool(B), false)
			want := make([]float32, B*m.W.Config.EmbedDim)
			v.HeadForward(want, pooled, B)
			closeSlices(t, "features", feat, want, 1e-5)

			bw := &m.W.Vision.Blocks[L-1]
			proj := func(b, tok, off int) []float32 {
				r := xl[(b*T+tok)*D : (b*T+tok+1)*D]
				var mu, va float64
				for _, y := range r {
					mu += float64(y)
				}
				mu /= float64(D)
				for _, y := range r {
					va += (float64(y) - mu) * (float64(y) - mu)
				}
				rs := 1 / math.Sqrt(va/float64(D)+1e-5)
				out := make([]float32, D)
				for o := 0; o < D; o++ {
					s := float64(bw.InProjB[off+o])
					for j, y := range r {
						h := (float64(y)-mu)*rs*float64(bw.Ln1W[j]) + float64(bw.Ln1B[j])
						s += h * float64(bw.InProjW[(off+o)*D+j])
					}
					out[o] = float32(s)
				}
				return out
			}
			for b := 0; b < B; b++ {
				closeSlices(t, fmt.Sprintf("q[%d]", b), q[b*D:(b+1)*D], proj(b, 0, 0), 1e-4)
				for i := 0; i < n; i++ {
					closeSlices(t, fmt.Sprintf("k[%d,%d]", b, i), k[(b*n+i)*D:(b*n+i+1)*D], proj(b, 1+i, D), 1e-4)
				}
			}
		})
	}
}

func closeSlices(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %g, want %g", name, i, got[i], want[i])
		}
	}
}

// TestPromptedVisionBackward checks the gradient with respect to the prompt
// tokens through every block, the head and the q/k projections, by finite
// differences of L = ⟨feat, r₁⟩ + ⟨q, r₂⟩ + ⟨k, r₃⟩ (and of each term alone).
func TestPromptedVisionBackward(t *testing.T) {
	for _, L := range []int{1, 3} {
		for _, terms := range []string{"all", "feat", "qk"} {
			t.Run(fmt.Sprintf("layers=%d/%s", L, terms), func(t *testing.T) {
				const n, B = 2, 3
				m, x0, prompts, rng := vptSetup(t, L, n, B)
				pv, err := NewPromptedVision(m, n)
				if err != nil {
					t.Fatal(err)
				}
				D, E := m.Vision.Cfg.Width, m.W.Config.EmbedDim
				r1, r2, r3 := gradcheck.Rand(rng, B*E, 1), gradcheck.Rand(rng, B*D, 1), gradcheck.Rand(rng, B*n*D, 1)
				if terms == "feat" {
					r2, r3 = nil, nil
				}
				if terms == "qk" {
					clear(r1)
				}
				loss := func() float64 {
					feat, q, k, err := pv.Forward(x0, prompts, B, true)
					if err != nil {
						t.Fatal(err)
					}
					s := gradcheck.Dot(feat, r1)
					if r2 != nil {
						s += gradcheck.Dot(q, r2) + gradcheck.Dot(k, r3)
					}
					return s
				}
				loss()
				g := append([]float32(nil), pv.Backward(r1, r2, r3)...)
				if err := gradcheck.Check("prompts", prompts, g, loss, 1e-2, 2e-2, 40, rng); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestPromptedVisionErrors: bad sizes are errors, not panics.
func TestPromptedVisionErrors(t *testing.T) {
	m, x0, prompts, _ := vptSetup(t, 2, 2, 1)
	if _, err := NewPromptedVision(m, 0); err == nil {
		t.Error("0 prompt tokens accepted")
	}
	pv, err := NewPromptedVision(m, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := pv.Forward(x0, prompts[1:], 1, false); err == nil {
		t.Error("short prompts accepted")
	}
	if _, _, _, err := pv.Forward(x0, prompts, 2, false); err == nil {
		t.Error("short prefix accepted")
	}
}

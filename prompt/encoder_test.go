package prompt

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// tinyConfig is a 2-block text tower with a 12-token context.
func tinyConfig() clip.Config {
	return clip.Config{EmbedDim: 6,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 1, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 12, VocabSize: 20, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
}

// tinyTokens are R rows "SOT X X X c… . EOT 0…" (SOT 18, EOT 19, X 5) with
// class names of 1..3 tokens, so the EOTs sit at different positions.
func tinyTokens(R, nCtx, ctxLen int) []int {
	tok := make([]int, R*ctxLen)
	for r := 0; r < R; r++ {
		row := tok[r*ctxLen : (r+1)*ctxLen]
		row[0] = 18
		p := 1
		for ; p <= nCtx; p++ {
			row[p] = 5
		}
		for k := 0; k <= r%3; k++ {
			row[p] = 6 + (r+k)%10
			p++
		}
		row[p], row[p+1] = 3, 19
	}
	return tok
}

func tinyModel(t testing.TB) *clip.Model {
	w := clip.Random(tinyConfig(), 7)
	// Embeddings start tiny (std 0.01–0.02); scale them up so the test
	// exercises the attention and LayerNorms away from their linear regime.
	for _, x := range [][]float32{w.Text.TokenEmb, w.Text.PosEmb} {
		for j := range x {
			x[j] *= 50
		}
	}
	return clip.New(w)
}

// fullLength encodes rows with context ctx [G, n, D] at full length through
// the model's own text tower (no truncation): the reference for Forward.
func fullLength(t *testing.T, m *clip.Model, tokens []int, ctx []float32, G, n int) []float32 {
	tx := m.Text
	L, D := tx.Cfg.ContextLength, tx.Cfg.Width
	R := len(tokens) / L
	e := make([]float32, R*L*D)
	if err := tx.TokenEmbed(e, tokens, R); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < R; r++ {
		g := r / (R / G)
		copy(e[(r*L+1)*D:(r*L+1+n)*D], ctx[g*n*D:(g+1)*n*D])
	}
	x0 := tx.EmbedForward(e, R)
	pooled := tx.Stack.Forward(x0, R, L, 0, len(tx.Stack.Blocks), clip.EOTPositions(tokens, R, L), false)
	feat := make([]float32, R*m.W.Config.EmbedDim)
	tx.HeadForward(feat, pooled, R)
	return feat
}

func maxRel(got, want []float32) float64 {
	var d, ref float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i]-want[i])))
		ref = math.Max(ref, math.Abs(float64(want[i])))
	}
	return d / ref
}

// TestTruncationExact compares the truncated encoder with the full-length
// text tower, on the tiny random model and on clip-tiny (77 tokens).
func TestTruncationExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(name string, m *clip.Model, tokens []int, n, G int) {
		enc, err := NewEncoder(m, tokens, n)
		if err != nil {
			t.Fatal(err)
		}
		if enc.T >= m.Text.Cfg.ContextLength {
			t.Fatalf("%s: nothing truncated (T = %d)", name, enc.T)
		}
		ctx := gradcheck.Rand(rng, G*n*enc.D, 0.5)
		got, err := enc.Forward(ctx, G, true)
		if err != nil {
			t.Fatal(err)
		}
		want := fullLength(t, m, tokens, ctx, G, n)
		if r := maxRel(got, want); r > 1e-6 {
			t.Errorf("%s: truncated (T = %d) vs full length: rel %.3g", name, enc.T, r)
		}
	}
	check("tiny G=1", tinyModel(t), tinyTokens(6, 3, 12), 3, 1)
	check("tiny G=3", tinyModel(t), tinyTokens(6, 3, 12), 3, 3)
	w, _, err := checkpoint.Load("../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ref, _, err := ReadFile("../testdata/promptfl/step.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := Ints(ref, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	check("clip-tiny", clip.New(w), tokens, 4, 1)
}

// TestGradCheck compares Backward with finite differences of
// L = Σ feat ⊙ r for shared, grouped and class-specific contexts.
func TestGradCheck(t *testing.T) {
	m := tinyModel(t)
	const R, n = 6, 3
	tokens := tinyTokens(R, n, 12)
	for _, G := range []int{1, 2, R} {
		rng := rand.New(rand.NewPCG(uint64(G), 3))
		enc, err := NewEncoder(m, tokens, n)
		if err != nil {
			t.Fatal(err)
		}
		ctx := gradcheck.Rand(rng, G*n*enc.D, 1)
		rw := gradcheck.Rand(rng, R*enc.E, 1)
		loss := func() float64 {
			f, err := enc.Forward(ctx, G, false)
			if err != nil {
				t.Fatal(err)
			}
			return gradcheck.Dot(f, rw)
		}
		if _, err := enc.Forward(ctx, G, true); err != nil {
			t.Fatal(err)
		}
		grad := append([]float32(nil), enc.Backward(rw)...)
		if err := gradcheck.Check("ctx", ctx, grad, loss, 1e-2, 2e-2, 60, rng); err != nil {
			t.Errorf("G=%d: %v", G, err)
		}
	}
}

// TestEncodersIndependent runs two encoders on one model interleaved: each
// keeps its own activations for Backward.
func TestEncodersIndependent(t *testing.T) {
	m := tinyModel(t)
	tokens := tinyTokens(4, 2, 12)
	rng := rand.New(rand.NewPCG(5, 5))
	a, _ := NewEncoder(m, tokens, 2)
	b, _ := NewEncoder(m, tokens, 2)
	ca, cb := gradcheck.Rand(rng, 2*a.D, 1), gradcheck.Rand(rng, 2*a.D, 1)
	rw := gradcheck.Rand(rng, 4*a.E, 1)
	if _, err := a.Forward(ca, 1, true); err != nil {
		t.Fatal(err)
	}
	alone := append([]float32(nil), a.Backward(rw)...)
	if _, err := a.Forward(ca, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Forward(cb, 1, true); err != nil {
		t.Fatal(err)
	}
	b.Backward(rw)
	if r := maxRel(a.Backward(rw), alone); r != 0 {
		t.Errorf("encoder a's gradient changed by b's passes: rel %.3g", r)
	}
}

func TestEncoderErrors(t *testing.T) {
	m := tinyModel(t)
	tokens := tinyTokens(2, 3, 12)
	for _, tc := range []struct {
		name   string
		tokens []int
		n      int
		want   string
	}{
		{"n_ctx 0", tokens, 0, "n_ctx 0"},
		{"EOT inside the context", tokens, 6, "EOT at position"},
		{"ragged rows", tokens[:13], 3, "whole number"},
		{"id outside vocabulary", append([]int{18, -1}, tokens[2:]...), 3, "outside the vocabulary"},
	} {
		_, err := NewEncoder(m, tc.tokens, tc.n)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	enc, err := NewEncoder(m, tokens, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Forward(make([]float32, 3*enc.D), 3, false); err == nil {
		t.Error("3 groups over 2 rows: no error")
	}
	if _, err := enc.Forward(make([]float32, 5), 1, false); err == nil {
		t.Error("short context: no error")
	}
}

// TestAnchor: the token context reproduces the plain text encoder.
func TestAnchor(t *testing.T) {
	m := tinyModel(t)
	tokens := tinyTokens(5, 3, 12)
	enc, _ := NewEncoder(m, tokens, 3)
	got, err := enc.Forward(enc.TokenContext(), enc.R, false)
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.EncodeText(tokens, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r := maxRel(got, want); r > 1e-6 {
		t.Errorf("literal prompts: rel %.3g against Model.EncodeText", r)
	}
}

// TestSharedPrefixMatches compares the shared-prefix path with the plain
// truncated one (features and context gradients), for one and two groups,
// and checks that rows with different first tokens fall back.
func TestSharedPrefixMatches(t *testing.T) {
	m := tinyModel(t)
	const R, n = 6, 3
	tokens := tinyTokens(R, n, 12)
	for _, G := range []int{1, 2, 3} {
		rng := rand.New(rand.NewPCG(uint64(G), 9))
		packed, _ := NewEncoder(m, tokens, n)
		plain, _ := NewEncoder(m, tokens, n)
		plain.noShare = true
		ctx := gradcheck.Rand(rng, G*n*packed.D, 1)
		rw := gradcheck.Rand(rng, R*packed.E, 1)
		fp, _ := packed.Forward(ctx, G, true)
		if !packed.usedPack || packed.shared.N >= R*packed.T {
			t.Fatalf("G=%d: shared-prefix path not taken", G)
		}
		fu, _ := plain.Forward(ctx, G, true)
		if r := maxRel(fp, fu); r > 1e-6 {
			t.Errorf("G=%d: features rel %.3g", G, r)
		}
		if r := maxRel(packed.Backward(rw), plain.Backward(rw)); r > 1e-5 {
			t.Errorf("G=%d: context gradient rel %.3g", G, r)
		}
	}
	odd := append([]int(nil), tokens...)
	odd[12] = 17 // row 1 starts with another token
	enc, _ := NewEncoder(m, odd, n)
	if enc.canShare(1) || enc.canShare(R) {
		t.Errorf("canShare: %v for rows with different first tokens, %v for one row per group; want false", enc.canShare(1), enc.canShare(R))
	}
}

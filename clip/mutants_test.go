package clip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/nn"
)

// Tests written for mutants that survived the mutation sweep of clip
// (docs/mutation/clip.json); each names the behaviour it pins down.

// TestEOTPositionsFirstMaximum: CLIP pools at tokens.argmax(-1), and
// torch.argmax returns the first of equal maxima.
func TestEOTPositionsFirstMaximum(t *testing.T) {
	tokens := []int{
		3, 7, 7, 0, // tie: first 7 at 1
		0, 0, 0, 0, // all equal: position 0
		1, 2, 9, 4,
	}
	got := EOTPositions(tokens, 3, 4)
	want := []int{1, 0, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("EOTPositions row %d = %d, want %d (first maximum, as torch.argmax)", i, got[i], want[i])
		}
	}
}

// TestTokenEmbedRejectsVocabSize: the id equal to the vocabulary size is
// already outside it (ids are 0 … V-1) and is an error naming it, not a panic.
func TestTokenEmbedRejectsVocabSize(t *testing.T) {
	m := New(Random(tinyConfig(), 1))
	c := m.Text.Cfg
	tokens := make([]int, c.ContextLength)
	tokens[2] = c.VocabSize
	e := make([]float32, c.ContextLength*c.Width)
	err := m.Text.TokenEmbed(e, tokens, 1)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("token %d at position 2", c.VocabSize)) {
		t.Fatalf("id %d = vocabulary size: err = %v, want an error naming it", c.VocabSize, err)
	}
	tokens[2] = c.VocabSize - 1
	if err := m.Text.TokenEmbed(e, tokens, 1); err != nil {
		t.Fatalf("last id of the vocabulary refused: %v", err)
	}
}

// TestGridWithoutPatches: a ResNet tower (patch size 0) has no grid; it must
// not divide by zero.
func TestGridWithoutPatches(t *testing.T) {
	if g := (VisionConfig{ImageSize: 224}).Grid(); g != 0 {
		t.Fatalf("Grid() with patch size 0 = %d, want 0", g)
	}
	if g := (VisionConfig{ImageSize: 224, PatchSize: 32}).Grid(); g != 7 {
		t.Fatalf("Grid() of ViT-B/32 at 224 = %d, want 7", g)
	}
}

// TestZeroShapes: Zero allocates every tensor at the shape of CLIP's
// state_dict for the configuration (text_projection [width, embed_dim],
// one block per layer).
func TestZeroShapes(t *testing.T) {
	c := tinyConfig()
	c.Text.Layers, c.Vision.Layers = 3, 1
	w := Zero(c)
	if len(w.Text.Blocks) != 3 || len(w.Vision.Blocks) != 1 {
		t.Fatalf("blocks: text %d vision %d, want 3 and 1", len(w.Text.Blocks), len(w.Vision.Blocks))
	}
	if n := len(w.Text.Proj); n != c.Text.Width*c.EmbedDim {
		t.Fatalf("text projection has %d values, want %d×%d", n, c.Text.Width, c.EmbedDim)
	}
	if n := len(w.Vision.Proj); n != c.Vision.Width*c.EmbedDim {
		t.Fatalf("vision projection has %d values, want %d×%d", n, c.Vision.Width, c.EmbedDim)
	}
}

// TestRandomInitScales: Random draws with the standard deviations of CLIP's
// initialize_parameters (proj_std = width^-½·(2·layers)^-½, attn_std =
// width^-½, fc_std = (2·width)^-½) and conv1 with (3·patch²)^-½ (fan-in);
// checked on sample standard deviations of large tensors.
func TestRandomInitScales(t *testing.T) {
	c := Config{EmbedDim: 64,
		Vision: VisionConfig{ImageSize: 64, PatchSize: 16, Width: 128, Layers: 2, Heads: 2, MLPWidth: 512},
		Text:   TextConfig{ContextLength: 8, VocabSize: 40, Width: 128, Layers: 4, Heads: 2, MLPWidth: 512}}
	w := Random(c, 3)
	std := func(x []float32) float64 {
		var s float64
		for _, v := range x {
			s += float64(v) * float64(v)
		}
		return math.Sqrt(s / float64(len(x)))
	}
	check := func(name string, x []float32, want float64) {
		t.Helper()
		if got := std(x); math.Abs(got-want) > 0.05*want {
			t.Errorf("%s: std %.4g, want %.4g", name, got, want)
		}
	}
	D := 128.0
	tb := w.Text.Blocks[0]
	check("text out_proj", tb.OutProjW, math.Pow(D, -0.5)*math.Pow(2*4, -0.5))
	check("text mlp proj", tb.ProjW, math.Pow(D, -0.5)*math.Pow(2*4, -0.5))
	check("text in_proj", tb.InProjW, math.Pow(D, -0.5))
	check("text fc", tb.FcW, math.Pow(2*D, -0.5))
	check("vision out_proj", w.Vision.Blocks[0].OutProjW, math.Pow(D, -0.5)*math.Pow(2*2, -0.5))
	check("conv1", w.Vision.Conv1W, math.Pow(3*16*16, -0.5))
	check("text_projection", w.Text.Proj, math.Pow(D, -0.5))
}

// TestNewPromptedVisionOneToken: one prompt token is the smallest valid
// VPT configuration and is accepted.
func TestNewPromptedVisionOneToken(t *testing.T) {
	m, x0, prompts, _ := vptSetup(t, 2, 1, 1)
	pv, err := NewPromptedVision(m, 1)
	if err != nil {
		t.Fatalf("1 prompt token refused: %v", err)
	}
	if _, _, _, err := pv.Forward(x0, prompts, 1, false); err != nil {
		t.Fatal(err)
	}
}

// TestPromptedVisionBackwardOneSided: a gradient at q alone or at k alone
// reaches the prompts (finite differences of ⟨q, r₂⟩ or ⟨k, r₃⟩).
func TestPromptedVisionBackwardOneSided(t *testing.T) {
	for _, side := range []string{"q", "k"} {
		t.Run(side, func(t *testing.T) {
			const n, B = 2, 2
			m, x0, prompts, rng := vptSetup(t, 2, n, B)
			pv, err := NewPromptedVision(m, n)
			if err != nil {
				t.Fatal(err)
			}
			D, E := m.Vision.Cfg.Width, m.W.Config.EmbedDim
			r1 := make([]float32, B*E)
			var r2, r3 []float32
			if side == "q" {
				r2 = gradcheck.Rand(rng, B*D, 1)
			} else {
				r3 = gradcheck.Rand(rng, B*n*D, 1)
			}
			loss := func() float64 {
				_, q, k, err := pv.Forward(x0, prompts, B, true)
				if err != nil {
					t.Fatal(err)
				}
				if r2 != nil {
					return gradcheck.Dot(q, r2)
				}
				return gradcheck.Dot(k, r3)
			}
			loss()
			g := append([]float32(nil), pv.Backward(r1, r2, r3)...)
			if err := gradcheck.Check("prompts", prompts, g, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPromptedVisionBF16: in bfloat16 the prompted encoder's q, k and the
// prompt gradient stay within bfloat16 rounding of float32 (the q/k
// products use the bf16 rows of in_proj, not an empty view), and the frozen
// block copies keep the bf16 weights.
func TestPromptedVisionBF16(t *testing.T) {
	const n, B = 2, 2
	run := func(p gemm.Precision) (q, k, g []float32) {
		m, x0, prompts, rng := vptSetup(t, 2, n, B)
		if err := m.SetPrecision(p); err != nil {
			t.Fatal(err)
		}
		if p == gemm.BF16 {
			for _, b := range m.Vision.Stack.Blocks {
				if b.FrozenCopy().Precision() != gemm.BF16 {
					t.Fatal("FrozenCopy of a bf16 block is not bf16")
				}
			}
		}
		pv, err := NewPromptedVision(m, n)
		if err != nil {
			t.Fatal(err)
		}
		D, E := m.Vision.Cfg.Width, m.W.Config.EmbedDim
		_, q, k, err = pv.Forward(x0, prompts, B, true)
		if err != nil {
			t.Fatal(err)
		}
		q, k = append([]float32(nil), q...), append([]float32(nil), k...)
		r1, r2, r3 := make([]float32, B*E), gradcheck.Rand(rng, B*D, 1), gradcheck.Rand(rng, B*n*D, 1)
		g = append([]float32(nil), pv.Backward(r1, r2, r3)...)
		return q, k, g
	}
	q32, k32, g32 := run(gemm.FP32)
	q16, k16, g16 := run(gemm.BF16)
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"q", q16, q32}, {"k", k16, k32}, {"prompt gradient", g16, g32}} {
		var maxRef, maxDiff float64
		for i := range c.want {
			maxRef = math.Max(maxRef, math.Abs(float64(c.want[i])))
			maxDiff = math.Max(maxDiff, math.Abs(float64(c.got[i]-c.want[i])))
		}
		if maxDiff > 0.03*maxRef {
			t.Errorf("%s: bf16 vs fp32 max |Δ| %.3g of max |fp32| %.3g (> 3%%)", c.name, maxDiff, maxRef)
		}
	}
}

// TestImagePrefixLaterStart: from block ℓ ≥ 2 on, the prefix is the
// embedding run through blocks 0 … ℓ-2, each applied here one by one.
func TestImagePrefixLaterStart(t *testing.T) {
	const B = 2
	c := tinyConfig()
	c.Vision.Layers = 3
	m := New(Random(c, 9))
	rng := rand.New(rand.NewPCG(4, 4))
	S := c.Vision.ImageSize
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	want := append([]float32(nil), ImagePrefix(m, 1, px, B, nil)...)
	T, D := c.Vision.Tokens(), c.Vision.Width
	sc := &BlockScratch{}
	for start := 2; start <= 3; start++ {
		out := make([]float32, B*T*D)
		m.Vision.Stack.Blocks[start-2].Forward(out, want, B, T, nil, false, sc)
		want = out
		got := ImagePrefix(m, start, px, B, nil)
		closeSlices(t, fmt.Sprintf("prefix at %d", start), got, want, 1e-6)
	}
}

// rowAdapter is a zero adapter that records the sizes the block hands it.
type rowAdapter struct{ lenH, lenOut, n int }

func (a *rowAdapter) Forward(out, h []float32, N int)    { a.lenH, a.lenOut, a.n = len(h), len(out), N }
func (a *rowAdapter) Backward(dh, dout []float32, N int) {}

// TestAdapterSeesExactRows: the block hands its adapter h and out of
// exactly N·D values (Adapter's contract: [N, D]), full and pruned.
func TestAdapterSeesExactRows(t *testing.T) {
	const B = 2
	c := tinyConfig()
	w := Random(c, 2)
	T, D := c.Text.ContextLength, c.Text.Width
	x := gradcheck.Rand(rand.New(rand.NewPCG(1, 1)), B*T*D, 1)
	for _, pool := range [][]int{nil, {1, 3}} {
		ad := &rowAdapter{}
		blk := &Block{W: &w.Text.Blocks[0], D: D, H: 2, MLP: 16, Causal: true, Adapter: ad}
		out := nn.Grow(nil, B*T*D)
		blk.Forward(out, x, B, T, pool, false, &BlockScratch{})
		N := B * T
		if pool != nil {
			N = B
		}
		if ad.n != N || ad.lenH != N*D || ad.lenOut != N*D {
			t.Fatalf("pool %v: adapter got N=%d, len(h)=%d, len(out)=%d; want %d, %d, %d", pool, ad.n, ad.lenH, ad.lenOut, N, N*D, N*D)
		}
	}
}

// TestFrozenBF16InputGrad: a frozen block in bfloat16 computes its input
// gradients with its bfloat16 weights (dout and w rounded to bfloat16,
// float32 accumulation), checked against that product in float64; a
// float32 product with the unrounded weights differs by bf16 rounding.
func TestFrozenBF16InputGrad(t *testing.T) {
	c := tinyConfig()
	w := Random(c, 8)
	D, MLP := c.Text.Width, c.Text.MLPWidth
	b := &Block{W: &w.Text.Blocks[0], D: D, H: 2, MLP: MLP}
	if err := b.SetPrecision(gemm.BF16); err != nil {
		t.Fatal(err)
	}
	if b.Precision() != gemm.BF16 {
		t.Fatal("block not in bf16")
	}
	const N = 5
	rng := rand.New(rand.NewPCG(3, 8))
	dout := gradcheck.Rand(rng, N*D, 1)
	got := make([]float32, N*MLP)
	b.inputGrad(got, nil, nil, dout, nil, b.W.ProjW, b.bf.proj, N, MLP, D) // proj: [D, MLP]
	acc := make([]float32, N*MLP)                                          // linearBackward's frozen path, onto zeros
	b.linearBackward(acc, nil, nil, dout, nil, b.W.ProjW, b.bf.proj, N, MLP, D)
	var maxDiff, maxRef float64
	for i := 0; i < N; i++ {
		for j := 0; j < MLP; j++ {
			var s float64
			for o := 0; o < D; o++ {
				s += float64(gemm.RoundBF16(dout[i*D+o])) * float64(gemm.RoundBF16(b.W.ProjW[o*MLP+j]))
			}
			maxRef = math.Max(maxRef, math.Abs(s))
			maxDiff = math.Max(maxDiff, math.Abs(float64(got[i*MLP+j])-s))
			maxDiff = math.Max(maxDiff, math.Abs(float64(acc[i*MLP+j])-s))
		}
	}
	if maxDiff > 1e-5*maxRef {
		t.Fatalf("frozen bf16 input gradient: max |Δ| %.3g from the bf16 product (max %.3g)", maxDiff, maxRef)
	}
}

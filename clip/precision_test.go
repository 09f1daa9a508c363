package clip

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/gemm"
)

// TestBF16LogitsCloseToFP32 is the accuracy guard of the bfloat16 frozen
// path: on the clip-tiny fixture model every logit stays within 1% of the
// float32 logits' scale (max |Δ| ≤ 0.01·max |fp32|; an elementwise ratio
// is meaningless for logits near 0) and every prediction is unchanged;
// switching back to float32 is fixture-exact again.
func TestBF16LogitsCloseToFP32(t *testing.T) {
	w := loadTinyOpenAI(t)
	fx := readFixture(t, "../testdata/clip-tiny/forward.safetensors")
	images, tokens := f32(t, fx, "images"), ints(t, fx, "tokens")
	m := New(w)
	const nI, nT = 3, 4
	logits := func() []float32 {
		img := m.EncodeImage(images, nI)
		txt, err := m.EncodeText(tokens, nT)
		if err != nil {
			t.Fatal(err)
		}
		return Logits(img, txt, nI, nT, 64, w.LogitScale)
	}
	ref := logits()
	if err := m.SetPrecision(gemm.BF16); err != nil {
		t.Fatal(err)
	}
	for _, b := range m.Vision.Stack.Blocks {
		if b.Precision() != gemm.BF16 {
			t.Fatal("frozen block not in bf16 after SetPrecision(BF16)")
		}
	}
	got := logits()
	var maxDiff, maxRef float64
	for i := range ref {
		maxDiff = max(maxDiff, math.Abs(float64(got[i]-ref[i])))
		maxRef = max(maxRef, math.Abs(float64(ref[i])))
	}
	t.Logf("bf16 (%s) vs fp32 logits: max |Δ| = %.3g, %.3g%% of max |fp32 logit| %.3g", gemm.BF16Backend(), maxDiff, 100*maxDiff/maxRef, maxRef)
	if maxDiff == 0 {
		t.Fatal("bf16 logits identical to fp32: the bf16 path did not run")
	}
	if maxDiff > 0.01*maxRef {
		t.Errorf("bf16 logits differ from fp32 by %.3g, more than 1%% of %.3g", maxDiff, maxRef)
	}
	argmax := func(row []float32) int {
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		return best
	}
	for i := 0; i < nI; i++ {
		if a, b := argmax(got[i*nT:(i+1)*nT]), argmax(ref[i*nT:(i+1)*nT]); a != b {
			t.Errorf("image %d: bf16 predicts class %d, fp32 %d", i, a, b)
		}
	}
	if err := m.SetPrecision(gemm.FP32); err != nil {
		t.Fatal(err)
	}
	closeElementwise(t, "logits_per_image after SetPrecision(FP32)", logits(), f32(t, fx, "logits_per_image"), 1e-4)
}

// TestBF16BlockBackward compares a frozen block's forward output and input
// gradient (full and pruned) in bfloat16 with float32, and checks that a
// block with weight gradients ignores the bfloat16 setting.
func TestBF16BlockBackward(t *testing.T) {
	w := loadTinyOpenAI(t)
	rng := rand.New(rand.NewPCG(7, 7))
	B, T, D := 3, 17, 128
	x := make([]float32, B*T*D)
	dout := make([]float32, B*T*D)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		dout[i] = float32(rng.NormFloat64())
	}
	for _, pool := range [][]int{nil, {0, 5, 16}} {
		run := func(p gemm.Precision) (out, dx []float32) {
			b := &Block{W: &w.Vision.Blocks[1], D: D, H: 2, MLP: 512}
			if err := b.SetPrecision(p); err != nil {
				t.Fatal(err)
			}
			var sc BlockScratch
			n := B * T * D
			if pool != nil {
				n = B * D
			}
			out, dx = make([]float32, n), make([]float32, B*T*D)
			b.Forward(out, x, B, T, pool, true, &sc)
			b.Backward(dx, dout[:n], &sc)
			return out, dx
		}
		o32, d32 := run(gemm.FP32)
		o16, d16 := run(gemm.BF16)
		for _, c := range []struct {
			name     string
			got, ref []float32
		}{{"output", o16, o32}, {"input gradient", d16, d32}} {
			var num, den float64
			for i := range c.ref {
				d := float64(c.got[i] - c.ref[i])
				num += d * d
				den += float64(c.ref[i]) * float64(c.ref[i])
			}
			rel := math.Sqrt(num / den)
			t.Logf("pool %v, %s: ‖bf16 − fp32‖/‖fp32‖ = %.3g", pool, c.name, rel)
			if rel > 0.02 || rel == 0 {
				t.Errorf("pool %v, %s: relative difference %.3g, want in (0, 0.02]", pool, c.name, rel)
			}
		}
	}
	g := ZeroLike(w)
	b := &Block{W: &w.Vision.Blocks[1], G: &g.Vision.Blocks[1], D: D, H: 2, MLP: 512}
	if err := b.SetPrecision(gemm.BF16); err != nil {
		t.Fatal(err)
	}
	if b.Precision() != gemm.FP32 {
		t.Error("a block with weight gradients runs in bf16")
	}
}

func benchBlockBF16(b *testing.B, backward bool) {
	c := ViTB16()
	c.Vision.Layers, c.Text.Layers = 1, 1
	m := New(Random(c, 1))
	if err := m.SetPrecision(gemm.BF16); err != nil {
		b.Fatal(err)
	}
	blk := m.Vision.Stack.Blocks[0]
	B, T, D := 32, 197, 768
	rng := rand.New(rand.NewPCG(1, 1))
	x, out, dx, dout := make([]float32, B*T*D), make([]float32, B*T*D), make([]float32, B*T*D), make([]float32, B*T*D)
	for i := range x {
		x[i], dout[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	var sc BlockScratch
	blk.Forward(out, x, B, T, nil, true, &sc)
	blk.Backward(dx, dout, &sc)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if backward {
			blk.Backward(dx, dout, &sc)
		} else {
			blk.Forward(out, x, B, T, nil, true, &sc)
		}
	}
}

// BenchmarkBlockForwardBF16 is BenchmarkBlockForward with bf16 frozen weights.
func BenchmarkBlockForwardBF16(b *testing.B) { benchBlockBF16(b, false) }

// BenchmarkBlockBackwardBF16 is BenchmarkBlockBackward with bf16 frozen weights.
func BenchmarkBlockBackwardBF16(b *testing.B) { benchBlockBF16(b, true) }

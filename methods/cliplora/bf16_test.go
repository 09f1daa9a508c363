package cliplora

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
)

// TestBF16Gradients compares the LoRA gradients of the bfloat16 frozen path
// (every block's weight products, forward and input gradient, in bfloat16
// with float32 accumulation) with the float32 ones, which TestGradients
// checks against finite differences: every factor's gradient within 8%
// (relative norm; bfloat16 keeps 8 bits, ≈ 0.4% per rounding, through four
// blocks, two encoders and the cosine head), and not equal to float32 (the
// bfloat16 path ran).
func TestBF16Gradients(t *testing.T) {
	m := tinyModel(3)
	m.W.LogitScale = 2
	s := &Settings{Rank: 2, Alpha: 1, Dropout: 0, Scale: "sqrt"}
	r := rand.New(rand.NewPCG(5, 6))
	l := New(m, s, r)
	for _, name := range slices.Sorted(maps.Keys(l.Params)) {
		p := l.Params[name]
		for i := range p.Data {
			p.Data[i] += float32(r.NormFloat64() * 0.3)
		}
	}
	B, C, E := 3, 3, 8
	px := make([]float32, B*3*8*8)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	prefix := clip.ImagePrefix(m, 1, px, B, nil)
	tokens := rows(C)
	tp, err := clip.TextPrefix(m, 1, tokens, C)
	if err != nil {
		t.Fatal(err)
	}
	eot := clip.EOTPositions(tokens, C, 8)
	labels := []int{0, 2, 1}
	step := func(p gemm.Precision) (float64, map[string][]float32) {
		if err := m.SetPrecision(p); err != nil {
			t.Fatal(err)
		}
		l.Attach(m, r)
		l.ZeroGrads()
		img, txt := Features(m, prefix, B, tp, eot, true, nil, nil)
		var head clip.CosineLogits
		logits := append([]float32(nil), head.Forward(img, txt, B, C, E, m.W.LogitScale)...)
		dl := make([]float32, B*C)
		v := clip.CrossEntropy(logits, labels, B, C, dl)
		dImg, dTxt := make([]float32, B*E), make([]float32, C*E)
		head.Backward(dl, dImg, dTxt)
		Backward(m, dImg, dTxt)
		g := map[string][]float32{}
		for name, t := range l.Grads {
			g[name] = slices.Clone(t.Data)
		}
		return v, g
	}
	l32, g32 := step(gemm.FP32)
	l16, g16 := step(gemm.BF16)
	for _, b := range append(slices.Clone(m.Vision.Stack.Blocks), m.Text.Stack.Blocks...) {
		if b.Precision() != gemm.BF16 {
			t.Fatal("a LoRA block (frozen weights) is not in bf16 after SetPrecision(BF16)")
		}
	}
	t.Logf("loss fp32 %.6g, bf16 (%s) %.6g", l32, gemm.BF16Backend(), l16)
	if l16 == l32 {
		t.Error("bf16 loss equals fp32: the bf16 path did not run")
	}
	if math.Abs(l16-l32) > 0.02*math.Abs(l32) {
		t.Errorf("bf16 loss %.6g differs from fp32 %.6g by more than 2%%", l16, l32)
	}
	worst, same := 0.0, true
	for _, name := range slices.Sorted(maps.Keys(g32)) {
		d := gradcheck.RelNorm(g16[name], g32[name])
		worst = max(worst, d)
		if d > 0 {
			same = false
		}
		if d > 0.08 {
			t.Errorf("%s: bf16 gradient differs from fp32 by %.3g (relative norm), want ≤ 0.08", name, d)
		}
	}
	t.Logf("largest relative difference of a factor's gradient: %.3g", worst)
	if same {
		t.Error("bf16 gradients equal fp32: the bf16 path did not run")
	}
}

// TestBF16FrozenWeightsUntouched trains two rounds in bf16 through the
// production path (Build, Fit, the training loop) and checks that the
// frozen CLIP weights are bit-identical to a fresh copy afterwards, that the
// blocks stayed frozen and in bf16, and that the LoRA factors did move.
func TestBF16FrozenWeightsUntouched(t *testing.T) {
	for _, agg := range []string{AggregateAB, AggregateProduct} {
		t.Run(agg, func(t *testing.T) {
			m := tinyModel(4)
			if err := m.SetPrecision(gemm.BF16); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			px := make([]float32, 4*3*8*8)
			for i := range px {
				px[i] = float32(r.NormFloat64())
			}
			tc := parity.TensorClient{Pixels: px, Labels: []int{0, 1, 2, 1}}
			env, err := parity.TensorEnv(m, 1, rows(3), 3, []parity.TensorClient{tc}, train.Options{Epochs: 2, Batch: 2, LR: 0.5, Momentum: 0.9}, 9)
			if err != nil {
				t.Fatal(err)
			}
			defer env.TrainStore.Close()
			sec := Method{}.DefaultConfig().(*Settings)
			sec.Aggregate = agg
			plan, err := Method{}.Build(env, sec)
			if err != nil {
				t.Fatal(err)
			}
			coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: []federation.ClientProxy{federation.NewSite(plan.Clients[0], "")},
				Rounds: 2, Fraction: 1, Seed: 1, EvalEvery: 1}
			if _, err := coord.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m.W, tinyModel(4).W) {
				t.Error("training in bf16 changed the frozen CLIP weights")
			}
			for _, b := range append(slices.Clone(m.Vision.Stack.Blocks), m.Text.Stack.Blocks...) {
				if b.G != nil || b.Precision() != gemm.BF16 {
					t.Fatal("a block has weight gradients or left bf16 after training")
				}
			}
			site, err := plan.Site(0)
			if err != nil {
				t.Fatal(err)
			}
			moved := false
			init := New(tinyModel(4), sec, rand.New(rand.NewPCG(env.Seed, 0x10a)))
			for name, p := range init.Params {
				if !slices.Equal(site[name].Data, p.Data) {
					moved = true
				}
			}
			if !moved {
				t.Error("the LoRA factors did not move: nothing was trained")
			}
		})
	}
}

package cliplora

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

func tinyModel(seed uint64) *clip.Model {
	cfg := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 30, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	return clip.New(clip.Random(cfg, seed))
}

func rows(C int) []int {
	out := make([]int, C*8)
	for c := 0; c < C; c++ {
		copy(out[c*8:], []int{28, 3 + c, 10 + c, 29})
	}
	return out
}

// TestGradients checks the LoRA factors' gradients through both whole
// encoders (every block, the pruned last image block, the truncated text)
// against central finite differences of the cosine cross-entropy.
func TestGradients(t *testing.T) {
	m := tinyModel(3)
	s := &Settings{Rank: 2, Alpha: 1, Dropout: 0, Scale: "sqrt"}
	r := rand.New(rand.NewPCG(5, 6))
	l := New(m, s, r)
	for _, p := range l.Params { // B starts at zero: move it so every path carries gradient
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
	loss := func(train bool) float64 {
		l.Attach(m, r)
		img, txt := Features(m, prefix, B, tp, eot, train, nil, nil)
		var head clip.CosineLogits
		logits := append([]float32(nil), head.Forward(img, txt, B, C, E, m.W.LogitScale)...)
		dl := make([]float32, B*C)
		v := clip.CrossEntropy(logits, labels, B, C, dl)
		if train {
			dImg, dTxt := make([]float32, B*E), make([]float32, C*E)
			head.Backward(dl, dImg, dTxt)
			Backward(m, dImg, dTxt)
		}
		return v
	}
	l.ZeroGrads()
	loss(true)
	grads := l.Grads.Clone()
	for _, name := range []string{Name("visual", 0, "q", "A"), Name("visual", 1, "v", "B"), Name("visual", 1, "q", "B"),
		Name("text", 0, "k", "A"), Name("text", 1, "q", "B"), Name("text", 1, "v", "A")} {
		if err := gradcheck.Check(name, l.Params[name].Data, grads[name].Data, func() float64 { return loss(false) }, 3e-3, 2e-2, 12, r); err != nil {
			t.Error(err)
		}
	}
}

// TestResumeBitIdentical: two rounds, a restart with fresh clients, one more
// round equals three straight rounds (dropout draws included).
func TestResumeBitIdentical(t *testing.T) {
	run := func(dir string, rounds int, resume bool) tensor.Named {
		m := tinyModel(4)
		r := rand.New(rand.NewPCG(1, 2))
		px := make([]float32, 4*3*8*8)
		for i := range px {
			px[i] = float32(r.NormFloat64())
		}
		tc := methods.TensorClient{Pixels: px, Labels: []int{0, 1, 2, 1}}
		env, err := methods.TensorEnv(m, 1, rows(3), 3, []methods.TensorClient{tc, tc}, train.Options{Epochs: 1, Batch: 2, LR: 0.1, Momentum: 0.9}, 9)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := Method{}.Build(env, Method{}.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		var proxies []federation.ClientProxy
		for i, c := range plan.Clients {
			proxies = append(proxies, federation.NewSite(c, filepath.Join(dir, "site", string(rune('a'+i)))))
		}
		coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: rounds, Fraction: 1, Seed: 1,
			EvalEvery: 100, Store: federation.FileStore{Path: filepath.Join(dir, "ck")}}
		if resume {
			_, err = coord.Resume(context.Background())
		} else {
			_, err = coord.Run(context.Background())
		}
		if err != nil {
			t.Fatal(err)
		}
		return plan.Global()
	}
	straight := run(t.TempDir(), 3, false)
	dir := t.TempDir()
	run(dir, 2, false)
	resumed := run(dir, 3, true)
	for name, a := range straight {
		b := resumed[name]
		for i := range a.Data {
			if a.Data[i] != b.Data[i] {
				t.Fatalf("%s differs after resuming", name)
			}
		}
	}
}

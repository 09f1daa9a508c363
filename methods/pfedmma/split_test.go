package pfedmma

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
)

// splitModel is a random 3-block CLIP: adapters on blocks 2–3 run split
// (block 2 is full, block 3 pruned to the pooled token).
func splitModel() *clip.Model {
	cfg := clip.Config{EmbedDim: 24,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 48, Layers: 3, Heads: 2, MLPWidth: 96},
		Text:   clip.TextConfig{ContextLength: 16, VocabSize: 300, Width: 32, Layers: 3, Heads: 2, MLPWidth: 64}}
	return clip.New(clip.Random(cfg, 3))
}

// splitTokens are C class prompts of different lengths [C, ctx].
func splitTokens(C, ctx int) []int {
	tokens := make([]int, C*ctx)
	for c := 0; c < C; c++ {
		n := 3 + c%4
		tokens[c*ctx] = 298
		for i := 1; i < n; i++ {
			tokens[c*ctx+i] = 1 + (c*7+i*13)%290
		}
		tokens[c*ctx+n] = 299
	}
	return tokens
}

// TestSplitStepIsTheSame: a step on split records (block ℓ's adapter input
// and frozen output, computed once) gives bit-identical loss, logits,
// adapter gradients and evaluation logits to the step that runs block ℓ on
// the prefix, on the same batch.
func TestSplitStepIsTheSame(t *testing.T) {
	const B, C, start = 5, 4, 2
	m := splitModel()
	cfg := m.W.Config
	if !CanSplit(start, cfg.Vision.Layers) || CanSplit(cfg.Vision.Layers, cfg.Vision.Layers) || CanSplit(0, cfg.Vision.Layers) {
		t.Fatal("CanSplit: want only 1 ≤ start < L")
	}
	S := cfg.Vision.ImageSize
	r := rand.New(rand.NewPCG(1, 2))
	px := make([]float32, B*3*S*S)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	labels := []int{0, 3, 1, 2, 3}
	tokens := splitTokens(C, cfg.Text.ContextLength)
	mcfg := Config{Start: start, End: 3, Dim: 4, Scale: 0.5}
	learner := func(split bool) *Learner {
		// the same seeded adapters for both; up-projections made non-zero
		a := New(mcfg, cfg.Vision.Width, cfg.Text.Width, rand.New(rand.NewPCG(5, 6)))
		rr := rand.New(rand.NewPCG(7, 8))
		for _, n := range a.Names() {
			for i := range a.Params[n].Data {
				a.Params[n].Data[i] += 0.1 * float32(rr.NormFloat64())
			}
		}
		l, err := NewLearner(m, a, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Split = split
		l.Attach()
		if err := l.SetClasses(tokens, C); err != nil {
			t.Fatal(err)
		}
		return l
	}
	plain, split := learner(false), learner(true)
	prefix := clip.ImagePrefix(m, start, px, B, nil)
	rec := clip.ImageSplitRecords(m, start, px, B, nil)
	T, D := cfg.Vision.Tokens(), cfg.Vision.Width
	if len(rec) != B*clip.SplitLen(T, D) {
		t.Fatalf("split records: %d floats, want %d", len(rec), B*clip.SplitLen(T, D))
	}

	plain.Attach()
	lossP, logitsP, err := plain.Step(prefix, B, labels)
	if err != nil {
		t.Fatal(err)
	}
	logitsP = slices.Clone(logitsP)
	split.Attach()
	lossS, logitsS, err := split.Step(rec, B, labels)
	if err != nil {
		t.Fatal(err)
	}
	if lossP != lossS || !slices.Equal(logitsP, logitsS) {
		t.Errorf("loss %v vs %v, logits equal %v", lossP, lossS, slices.Equal(logitsP, logitsS))
	}
	nonzero := 0
	for _, n := range plain.Adapters.Names() {
		gp, gs := plain.Adapters.Grads[n].Data, split.Adapters.Grads[n].Data
		if !slices.Equal(gp, gs) {
			t.Errorf("gradient of %s differs", n)
		}
		for _, v := range gp {
			if v != 0 {
				nonzero++
				break
			}
		}
	}
	if nonzero < len(plain.Adapters.Names())/2 {
		t.Errorf("only %d of %d adapter gradients are non-zero: the check is vacuous", nonzero, len(plain.Adapters.Names()))
	}

	// evaluation
	plain.Attach()
	txtP := slices.Clone(plain.TextFeatures(false))
	evP := slices.Clone(plain.Logits(prefix, B, txtP))
	split.Attach()
	txtS := slices.Clone(split.TextFeatures(false))
	evS := split.Logits(rec, B, txtS)
	if !slices.Equal(txtP, txtS) || !slices.Equal(evP, evS) {
		t.Error("evaluation logits differ between split and plain records")
	}
}

// TestFrozenBlockIgnoresAdapters: split records hold the frozen block's
// output even while a learner's adapters are attached to the model.
func TestFrozenBlockIgnoresAdapters(t *testing.T) {
	const B, start = 2, 2
	m := splitModel()
	cfg := m.W.Config
	S := cfg.Vision.ImageSize
	px := make([]float32, B*3*S*S)
	for i := range px {
		px[i] = float32(i%11) / 11
	}
	clean := clip.ImageSplitRecords(m, start, px, B, nil)
	a := New(Config{Start: start, End: 3, Dim: 4, Scale: 0.5}, cfg.Vision.Width, cfg.Text.Width, rand.New(rand.NewPCG(1, 1)))
	for _, n := range a.Names() {
		for i := range a.Params[n].Data {
			a.Params[n].Data[i] = 0.3
		}
	}
	l, err := NewLearner(m, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Attach()
	attached := clip.ImageSplitRecords(m, start, px, B, nil)
	if !slices.Equal(clean, attached) {
		t.Error("split records change when adapters are attached")
	}
	if m.Vision.Stack.Blocks[start-1].Adapter == nil {
		t.Error("FrozenBlock did not restore the attached adapter")
	}
}

package cocoop

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
)

// randomModel is a 2-block text tower (context 12, embedding dim 32 so the
// meta-net has 2 hidden units) with embeddings scaled up so the blocks work
// away from their linear regime; tokens are C rows "SOT X… c… . EOT".
func randomModel(C, nCtx int) (*clip.Model, []int) {
	return methodtest.TinyCLIP{EmbedDim: 32, VisionLayers: 1, TextLayers: 2, EmbScale: 50}.Prompts(C, nCtx)
}

// TestGradCheck compares every tensor's gradient with central differences
// of the loss, coordinate-wise and along random directions, on the tiny
// CLIP from the fixture's initial prompt learner (first meta-net layer
// scaled up), on the fixture's images whose ReLU inputs are away from the
// kink.
func TestGradCheck(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+"step.safetensors")
	l, _, err := replay.Learner(m, init, ref, meta, false)
	if err != nil {
		t.Fatal(err)
	}
	// W₁ and b₁ scaled by 10: the init's ReLU inputs are ≈ 0.1, too close to
	// the kink for the ε below
	for _, name := range []string{ParamW1, ParamB1} {
		for i := range l.p[name].Data {
			l.p[name].Data[i] *= 10
		}
	}
	img := ref["image_features"].Data
	labels, err := prompt.Ints(ref, "labels")
	if err != nil {
		t.Fatal(err)
	}
	// keep the images whose meta-net pre-activations are all at least 5e-2
	// from the ReLU kink (more than the largest move, 2e-2, a step along a
	// unit direction gives them: |Î| = 1)
	all := len(labels)
	l.metaForward(img, all)
	pre := make([]float32, all*l.H)
	nn.LinearForward(pre, l.imn, l.p[ParamW1].Data, l.p[ParamB1].Data, all, l.E, l.H)
	var keepImg []float32
	var keepLab []int
	active := 0
	for b := 0; b < all; b++ {
		ok := true
		for _, v := range pre[b*l.H : (b+1)*l.H] {
			ok = ok && math.Abs(float64(v)) >= 5e-2
		}
		if !ok {
			continue
		}
		for _, v := range pre[b*l.H : (b+1)*l.H] {
			if v > 0 {
				active++
			}
		}
		keepImg = append(keepImg, img[b*l.E:(b+1)*l.E]...)
		keepLab = append(keepLab, labels[b])
	}
	if len(keepLab) < 3 || active == 0 {
		t.Fatalf("%d images away from the ReLU kink, %d active units: too few for the check", len(keepLab), active)
	}
	img, labels = keepImg, keepLab
	loss := func() float64 {
		v, _, _, err := l.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	loss()
	rng := rand.New(rand.NewPCG(2, 2))
	for _, name := range ParamNames {
		methodtest.Directional(t, name, l.p[name].Data, l.g[name].Clone().Data, loss, rng)
	}
}

// TestPerImageTextFeatures: each image's logits use its own prompts — the
// logits of a batch equal those of each image scored alone, and two images
// get different text features.
func TestPerImageTextFeatures(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, InitStd: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	img := gradcheck.Rand(rng, 3*32, 1)
	all, err := l.Logits(img, 3)
	if err != nil {
		t.Fatal(err)
	}
	all = append([]float32(nil), all...)
	// in chunks of 2 images (8 rows): the same logits
	defer func(n int) { evalRows = n }(evalRows)
	evalRows = 8
	chunked, err := l.Logits(img, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range chunked {
		if d := math.Abs(float64(v - all[i])); d > 1e-4 {
			t.Errorf("logit %d: chunked %g, whole %g", i, v, all[i])
		}
	}
	evalRows = 512
	for b := 0; b < 3; b++ {
		one, err := l.Logits(img[b*32:(b+1)*32], 1)
		if err != nil {
			t.Fatal(err)
		}
		for c := range one {
			if d := math.Abs(float64(one[c] - all[b*4+c])); d > 1e-4 {
				t.Errorf("image %d class %d: alone %g, in the batch %g", b, c, one[c], all[b*4+c])
			}
		}
	}
	if _, _, _, err := l.Step(img, []int{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	txt := l.Intermediates(3)["text_features"].Data
	same := true
	for i := 0; i < 4*32; i++ {
		if txt[i] != txt[4*32+i] {
			same = false
		}
	}
	if same {
		t.Error("two images got the same text features")
	}
}

func TestValidate(t *testing.T) {
	m, tokens := randomModel(4, 3)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{NCtx: 0}, "n_ctx"},
		{Config{NCtx: 3, InitStd: -1}, "init_std"},
		{Config{NCtx: 9}, "EOT"},
		{Config{NCtx: 3, InitCtx: make([]float32, 5)}, "ctx_init"},
	} {
		if _, err := New(m, tokens, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	l, err := New(m, tokens, Config{NCtx: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Step(make([]float32, 64), []int{0, 4}); err == nil || !strings.Contains(err.Error(), "label 4") {
		t.Errorf("label 4 of 4 classes: error %v", err)
	}
	if _, _, _, err := l.Step(make([]float32, 63), []int{0, 1}); err == nil {
		t.Error("short image features: no error")
	}
}

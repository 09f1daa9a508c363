package pretrain

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// TestDenseLossGradient checks the patch-token term's gradients (features of
// every token, caption features, logit scale) against finite differences,
// and that the class-token rows get none.
func TestDenseLossGradient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		B, T, E int
		scale   float32
	}{{"B3T5", 3, 5, 6, 1.5}, {"B4T2", 4, 2, 4, 2.5}} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, uint64(tc.B*tc.T)))
			feat := gradcheck.Rand(rng, tc.B*tc.T*tc.E, 1)
			txt := gradcheck.Rand(rng, tc.B*tc.E, 1)
			ls := []float32{tc.scale}
			loss := func() float64 {
				l, _ := DenseLoss(feat, txt, tc.B, tc.T, tc.E, ls[0], make([]float32, len(feat)), make([]float32, len(txt)))
				return l
			}
			dFeat, dTxt := make([]float32, len(feat)), make([]float32, len(txt))
			_, dScale := DenseLoss(feat, txt, tc.B, tc.T, tc.E, ls[0], dFeat, dTxt)
			for _, p := range []struct {
				name    string
				v, grad []float32
			}{{"feat", feat, dFeat}, {"txt", txt, dTxt}, {"logit_scale", ls, []float32{float32(dScale)}}} {
				if err := gradcheck.Check(p.name, p.v, p.grad, loss, 1e-3, 1e-2, 60, rng); err != nil {
					t.Fatal(err)
				}
			}
			for b := range tc.B {
				for k := range tc.E {
					if g := dFeat[b*tc.T*tc.E+k]; g != 0 {
						t.Fatalf("class token of image %d has gradient %v", b, g)
					}
				}
			}
		})
	}
}

// TestDensePool: the dense feature is the mean of the unit patch features,
// whatever the patches' norms, and ignores the class token.
func TestDensePool(t *testing.T) {
	const B, T, E = 1, 3, 2
	feat := []float32{100, -7, 3, 0, 0, 0.5} // class token, then patches (1,0)·3 and (0,1)·0.5
	out := make([]float32, E)
	DensePool(out, feat, B, T, E)
	if out[0] != 0.5 || out[1] != 0.5 {
		t.Fatalf("DensePool = %v, want [0.5 0.5]", out)
	}
}

// TestDenseStepGradient checks the whole model's gradients under the dense
// term (class-token InfoNCE + DenseWeight × DenseLoss, back through ln_post,
// proj, every vision token of every block and the text tower) against finite
// differences of the step's loss.
func TestDenseStepGradient(t *testing.T) {
	opts := microOptions(t)
	opts.DenseWeight = 0.7
	opts.Batch = 6
	tr, s := newTestRun(t, opts)
	b := s.make(0, 2)
	if b.err != nil {
		t.Fatal(b.err)
	}
	loss := func() float64 {
		l, _, err := tr.forwardBackward(b)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	loss()
	gls := tr.gls[0]
	byName := map[string][]float32{}
	grads := map[string][]float32{}
	for _, p := range tr.params.all() {
		byName[p.Name], grads[p.Name] = p.Value, append([]float32(nil), p.Grad...)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, name := range []string{"visual.proj", "visual.ln_post.weight", "visual.transformer.resblocks.0.attn.in_proj_weight",
		"visual.transformer.resblocks.0.mlp.c_proj.weight", "visual.conv1.weight", "visual.positional_embedding", "text_projection"} {
		v, ok := byName[name]
		if !ok {
			t.Fatalf("no parameter %s", name)
		}
		if err := gradcheck.Check(name, v, grads[name], loss, 1e-2, 3e-2, 12, rng); err != nil {
			t.Error(err)
		}
	}
	if err := gradcheck.Check("logit_scale", tr.ls, []float32{gls}, loss, 1e-2, 3e-2, 1, rng); err != nil {
		t.Error(err)
	}
}

// TestPatchFeaturesMatchTraining: the evaluation's patch features are the
// dense term's pooled features of the training forward pass.
func TestPatchFeaturesMatchTraining(t *testing.T) {
	opts := microOptions(t)
	opts.DenseWeight = 1
	tr, s := newTestRun(t, opts)
	b := s.make(0, 2)
	if b.err != nil {
		t.Fatal(b.err)
	}
	if _, _, err := tr.forwardBackward(b); err != nil {
		t.Fatal(err)
	}
	c := tr.m.W.Config
	B, T, E := opts.Batch, c.Vision.Tokens(), c.EmbedDim
	want := make([]float32, B*E)
	DensePool(want, tr.tokFeat, B, T, E)
	got := PatchFeatures(tr.m, b.pixels, B)
	for i := range want {
		if d := got[i] - want[i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("patch feature %d: %v at evaluation, %v in training", i, got[i], want[i])
		}
	}
}

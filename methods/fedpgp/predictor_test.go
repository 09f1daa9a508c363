package fedpgp

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
)

// TestPredictorLogits: the predictor scores pixels with the saved
// sigma + U·V of two prompts, each class the best of its prompts:
// exp(logit_scale)·cos(image, f_P row) in float64 from the frozen image
// encoder and a learner holding the saved parameters; a saved site
// without sigma is refused naming it.
func TestPredictorLogits(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	classes := []string{"red_circle", "blue square", "green striped triangle"}
	s := &Settings{NCtx: 4, Bottleneck: 2, NumPrompt: 2, Mu: 1, Temp: 0.5, InitStd: 0.5}
	pe := methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}
	tokens, err := pe.ClassPromptTokens(classes, client.Placeholder(4))
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tokens, s.config(9))
	if err != nil {
		t.Fatal(err)
	}
	saved := l.Params().Clone()
	txt, err := l.TextFeatures()
	if err != nil {
		t.Fatal(err)
	}
	txt = append([]float32(nil), txt...)
	pr, err := Method{}.Predictor(pe, s, saved)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 3))
	S, E := m.W.Config.Vision.ImageSize, m.W.Config.EmbedDim
	const B, C, N = 3, 3, 2
	px := make([]float32, B*3*S*S)
	for i := range px {
		px[i] = float32(rng.NormFloat64())
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != B*C {
		t.Fatalf("%d logits, want %d", len(got), B*C)
	}
	methods.DetachAll(m)
	img := m.EncodeImage(px, B)
	sc := math.Exp(float64(m.W.LogitScale))
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			best := math.Inf(-1)
			for n := 0; n < N; n++ {
				var xy, xx, yy float64
				for k := 0; k < E; k++ {
					x, y := float64(img[b*E+k]), float64(txt[(n*C+c)*E+k])
					xy, xx, yy = xy+x*y, xx+x*x, yy+y*y
				}
				best = math.Max(best, sc*xy/math.Sqrt(xx*yy))
			}
			if g := float64(got[b*C+c]); math.Abs(g-best) > 1e-4*(1+math.Abs(best)) {
				t.Fatalf("logit [%d, %d] = %v, want %v", b, c, g, best)
			}
		}
	}
	bad := saved.Clone()
	delete(bad, ParamSigma)
	pr, err = Method{}.Predictor(pe, s, bad)
	if err == nil {
		_, err = pr.Logits(px, B, classes)
	}
	if err == nil || !strings.Contains(err.Error(), ParamSigma) {
		t.Errorf("saved site without sigma: error %v", err)
	}
	if _, err := (Method{}).Predictor(pe, &Settings{NCtx: 0, Bottleneck: 2, NumPrompt: 1, Temp: 0.5}, saved); err == nil || !strings.Contains(err.Error(), "n_ctx") {
		t.Errorf("n_ctx 0: error %v", err)
	}
}

package adapt

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
)

// TestPredictorMatchesLearner: the Predictor built from saved parameters
// (3 domains, AdaLN on, non-zero) scores pixels exactly as the learner
// scores their cached prefixes.
func TestPredictorMatchesLearner(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	s := DefaultSettings()
	s.AdaLN = true
	cfg := s.config(3, 4)
	classes := []string{"red_circle", "blue square", "green triangle"}
	tokens, err := methods.PredictEnv{Model: m, Tok: tok}.ClassPromptTokens(classes, client.Placeholder(s.NCtx))
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLearner(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	P := InitParams(cfg, l.Dt, l.Dv, l.E)
	rng := rand.New(rand.NewPCG(1, 3))
	for name, p := range P {
		if name != ParamVisual && Averaged(name) {
			copy(p.Data, gradcheck.Rand(rng, len(p.Data), 0.05))
		}
	}
	S := m.W.Config.Vision.ImageSize
	const B = 4
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	if _, err := l.TextFeatures(P); err != nil {
		t.Fatal(err)
	}
	want, _, err := l.Logits(P, clip.ImagePrefix(m, 1, px, B, nil), B)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	pr, err := Method{}.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}, s, P)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("logit %d: predictor %g, learner %g", i, got[i], want[i])
		}
	}
	if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, s, nil); err == nil {
		t.Error("predictor without text prompts accepted")
	}
}

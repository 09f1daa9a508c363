package promptfl

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestPredictorLogits: the predictor scores pixels with the saved context:
// exp(logit_scale)·cos(image, class text) in float64 from the frozen image
// encoder and a learner holding the saved context; a saved site without
// the context is refused naming it.
func TestPredictorLogits(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	classes := []string{"red_circle", "blue square", "green striped triangle"}
	env := &methods.Env{Model: m, Tok: tok, Template: "a photo of a {}.",
		Task: &protocol.Task{Dataset: &dataset.Dataset{Classes: classes}, Spaces: []protocol.Space{{Classes: []int{0, 1, 2}}}}}
	s := &Settings{NCtx: 4, InitStd: 0.5}
	tokens, err := env.ClassPromptTokens(0, client.Placeholder(4))
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
	pr, err := Method{}.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: env.Template}, s, saved)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 3))
	S, E := m.W.Config.Vision.ImageSize, m.W.Config.EmbedDim
	const B, C = 3, 3
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
			var xy, xx, yy float64
			for k := 0; k < E; k++ {
				x, y := float64(img[b*E+k]), float64(txt[c*E+k])
				xy, xx, yy = xy+x*y, xx+x*x, yy+y*y
			}
			want := sc * xy / math.Sqrt(xx*yy)
			if g := float64(got[b*C+c]); math.Abs(g-want) > 1e-4*(1+math.Abs(want)) {
				t.Fatalf("logit [%d, %d] = %v, want %v", b, c, g, want)
			}
		}
	}
	if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, s, tensor.Named{}); err == nil || !strings.Contains(err.Error(), ParamCtx) {
		t.Errorf("saved site without the context: error %v", err)
	}
}

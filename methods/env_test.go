package methods_test

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/safetensors"
)

// TestFrozenScorerAtEveryDepth: zero-shot CLIP run from cached prefixes of
// any depth, from cached image features and from cached token features
// gives the full model's logits.
func TestFrozenScorerAtEveryDepth(t *testing.T) {
	w, _, err := checkpoint.Load("../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open("../testdata/clip-tiny/forward.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	images, err := f.Float32("images")
	if err != nil {
		t.Fatal(err)
	}
	tok64, _, err := f.Int64("tokens")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int, len(tok64))
	for i, v := range tok64 {
		tokens[i] = int(v)
	}
	m := clip.New(w)
	B, C, E := images.Shape[0], 4, w.Config.EmbedDim
	img := append([]float32(nil), m.EncodeImage(images.Data, B)...)
	txt, err := m.EncodeText(tokens, C)
	if err != nil {
		t.Fatal(err)
	}
	want := clip.Logits(img, append([]float32(nil), txt...), B, C, E, w.LogitScale)
	for _, depth := range []int{0, 1, 2, 4, methods.Features, methods.TokenFeatures} {
		env, err := parity.TensorEnv(m, depth, tokens, C, []parity.TensorClient{{Pixels: images.Data, Labels: make([]int, B)}}, train.Options{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		prefix := make([]float32, B*env.Prefixer.RecordLen())
		recs := make([]int, B)
		for i := range recs {
			recs[i] = env.TrainRecs[env.Task.Clients[0].Train[i]][0]
		}
		if err := env.TrainStore.GetBatch(recs, prefix); err != nil {
			t.Fatal(err)
		}
		got, err := (&methods.FrozenScorer{Env: env}).Logits(0, prefix, B)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("depth %d: logit %d = %v, want %v", depth, i, got[i], want[i])
			}
		}
		env.TrainStore.Close()
	}
}

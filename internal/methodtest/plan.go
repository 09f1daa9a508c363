package methodtest

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
)

// Build builds method m on env with settings sec and introduces the
// clients to the strategy (InitStrategy).
func Build(t testing.TB, m methods.Method, env *methods.Env, sec config.Section) *methods.Plan {
	t.Helper()
	plan, err := m.Build(env, sec)
	if err != nil {
		t.Fatal(err)
	}
	InitStrategy(t, plan)
	return plan
}

// PromptModel is a random two-block CLIP (seed 9, 8 px images) with
// 10-token prompts "SOT X×nCtx c EOT" of PromptClasses classes.
func PromptModel(nCtx int) (*clip.Model, []int) {
	c := clip.Config{EmbedDim: 6,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 10, VocabSize: 20, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	m := clip.New(clip.Random(c, 9))
	var tokens []int
	for cl := 0; cl < PromptClasses; cl++ {
		row := make([]int, c.Text.ContextLength)
		row[0] = 17
		for j := 1; j <= nCtx; j++ {
			row[j] = 3
		}
		row[nCtx+1], row[nCtx+2] = 4+cl, 19
		tokens = append(tokens, row...)
	}
	return m, tokens
}

// PromptClasses is the number of classes of PromptModel's prompts.
const PromptClasses = 3

// PromptEnv is an in-memory Env on cached image features of PromptModel
// over n clients, client k with 10 − 2k random images.
func PromptEnv(t testing.TB, nCtx, n int, opts train.Options) *methods.Env {
	t.Helper()
	m, tokens := PromptModel(nCtx)
	const C = PromptClasses
	rng := rand.New(rand.NewPCG(8, 1))
	var clients []parity.TensorClient
	for k := 0; k < n; k++ {
		N := 10 - 2*k
		tc := parity.TensorClient{Pixels: gradcheck.Rand(rng, N*3*8*8, 1)}
		for range N {
			tc.Labels = append(tc.Labels, rng.IntN(C))
		}
		clients = append(clients, tc)
	}
	env, err := parity.TensorEnv(m, methods.Features, tokens, C, clients, opts, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	return env
}

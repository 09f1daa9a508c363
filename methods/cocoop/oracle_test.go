package cocoop

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
)

// TestInitDraws: the context is N(0, init_std²) (σ·z for the generator's
// successive normals z) and then the meta-net is nn.Linear's default,
// U(−1/√fan_in, 1/√fan_in) for weights and biases ((2u − 1)/√fan_in for
// the successive uniforms u: linear1 weight and bias with fan_in E, then
// linear2's with fan_in H), replayed from the same seed.
func TestInitDraws(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, InitStd: 0.3, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	ref := rand.New(rand.NewPCG(7, 0xc0c0))
	for i, v := range l.p[ParamCtx].Data {
		if want := float32(ref.NormFloat64() * 0.3); v != want {
			t.Fatalf("ctx[%d] = %v, want %v", i, v, want)
		}
	}
	E, H := 32, 2
	for _, tc := range []struct {
		name string
		in   int
	}{{ParamW1, E}, {ParamB1, E}, {ParamW2, H}, {ParamB2, H}} {
		bound := 1 / math.Sqrt(float64(tc.in))
		for i, v := range l.p[tc.name].Data {
			if want := float32((2*ref.Float64() - 1) * bound); v != want {
				t.Fatalf("%s[%d] = %v, want %v (bound %v)", tc.name, i, v, want, bound)
			}
		}
	}
}

// TestSmallestSettings: n_ctx 1 is valid, and so is a meta-net of hidden
// width 1 (E = 16); E = 8 (width 0) is refused.
func TestSmallestSettings(t *testing.T) {
	if err := (Config{NCtx: 1}).Validate(); err != nil {
		t.Errorf("n_ctx 1: %v", err)
	}
	m, tokens := methodtest.TinyCLIP{EmbedDim: 16, VisionLayers: 1, TextLayers: 1, EmbScale: 50}.Prompts(3, 2)
	if l, err := New(m, tokens, Config{NCtx: 2, InitStd: 0.02}); err != nil || l.H != 1 {
		t.Errorf("E 16: learner %v, error %v; want hidden width 1", l, err)
	}
	m, tokens = methodtest.TinyCLIP{EmbedDim: 8, VisionLayers: 1, TextLayers: 1, EmbScale: 50}.Prompts(3, 2)
	if _, err := New(m, tokens, Config{NCtx: 2, InitStd: 0.02}); err == nil || !strings.Contains(err.Error(), "hidden width") {
		t.Errorf("E 8: error %v, want one naming the hidden width", err)
	}
}

// TestLogitsMatchStep: inference (Logits, in chunks of evalRows/C images
// that divide the batch and in one chunk) gives the logits of the training
// forward (Step), and a chunk never builds the prompts of more than
// evalRows/C images.
func TestLogitsMatchStep(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, InitStd: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 5))
	const B, C = 4, 4
	img := gradcheck.Rand(rng, B*32, 1)
	_, _, logits, err := l.Step(img, []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), logits...)
	defer func(n int) { evalRows = n }(evalRows)
	for _, rows := range []int{8, 512} {
		evalRows = rows
		clear(l.encs)
		got, err := l.Logits(img, B)
		if err != nil {
			t.Fatalf("evalRows %d: %v", rows, err)
		}
		if len(got) != B*C {
			t.Fatalf("evalRows %d: %d logits, want %d", rows, len(got), B*C)
		}
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("evalRows %d: logit %d = %v, Step's %v", rows, i, got[i], want[i])
			}
		}
		for n := range l.encs {
			if n > max(1, rows/C) {
				t.Errorf("evalRows %d: built the prompts of %d images at once, want at most %d", rows, n, max(1, rows/C))
			}
		}
	}
}

// TestPositionSetting: class_token_position takes "" (unset) and end, and
// refuses middle and front naming the key.
func TestPositionSetting(t *testing.T) {
	for _, tc := range []struct {
		pos string
		ok  bool
	}{{"", true}, {"end", true}, {"middle", false}, {"front", false}} {
		err := config.CheckSection("cocoop", &Settings{NCtx: 4, InitStd: 0.02, ClassTokenPosition: tc.pos})
		if tc.ok && err != nil {
			t.Errorf("position %q: %v", tc.pos, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "cocoop.class_token_position")) {
			t.Errorf("position %q: error %v, want one naming cocoop.class_token_position", tc.pos, err)
		}
	}
}

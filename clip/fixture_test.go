package clip

import (
	"fmt"
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
)

// loadTinyOpenAI reads the clip-tiny fixture in OpenAI names (a minimal
// loader for this package's tests; the checkpoint package is the real one).
func loadTinyOpenAI(t testing.TB) *Weights {
	t.Helper()
	f, err := safetensors.Open("../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) []float32 {
		x, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return x.Data
	}
	c := Config{EmbedDim: 64,
		Vision: VisionConfig{ImageSize: 32, PatchSize: 8, Width: 128, Layers: 4, Heads: 2, MLPWidth: 512},
		Text:   TextConfig{ContextLength: 77, VocabSize: 1000, Width: 128, Layers: 4, Heads: 2, MLPWidth: 512}}
	block := func(p string) BlockWeights {
		return BlockWeights{
			Ln1W: get(p + "ln_1.weight"), Ln1B: get(p + "ln_1.bias"),
			InProjW: get(p + "attn.in_proj_weight"), InProjB: get(p + "attn.in_proj_bias"),
			OutProjW: get(p + "attn.out_proj.weight"), OutProjB: get(p + "attn.out_proj.bias"),
			Ln2W: get(p + "ln_2.weight"), Ln2B: get(p + "ln_2.bias"),
			FcW: get(p + "mlp.c_fc.weight"), FcB: get(p + "mlp.c_fc.bias"),
			ProjW: get(p + "mlp.c_proj.weight"), ProjB: get(p + "mlp.c_proj.bias"),
		}
	}
	w := &Weights{Config: c, LogitScale: get("logit_scale")[0]}
	w.Vision = VisionWeights{Conv1W: get("visual.conv1.weight"), ClassEmb: get("visual.class_embedding"),
		PosEmb: get("visual.positional_embedding"), LnPreW: get("visual.ln_pre.weight"), LnPreB: get("visual.ln_pre.bias"),
		LnPostW: get("visual.ln_post.weight"), LnPostB: get("visual.ln_post.bias"), Proj: get("visual.proj")}
	w.Text = TextWeights{TokenEmb: get("token_embedding.weight"), PosEmb: get("positional_embedding"),
		LnFinalW: get("ln_final.weight"), LnFinalB: get("ln_final.bias"), Proj: get("text_projection")}
	for i := 0; i < 4; i++ {
		w.Vision.Blocks = append(w.Vision.Blocks, block(fmt.Sprintf("visual.transformer.resblocks.%d.", i)))
		w.Text.Blocks = append(w.Text.Blocks, block(fmt.Sprintf("transformer.resblocks.%d.", i)))
	}
	return w
}

func readFixture(t testing.TB, path string) *safetensors.File {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func f32(t testing.TB, f *safetensors.File, name string) []float32 {
	t.Helper()
	x, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return x.Data
}

func ints(t testing.TB, f *safetensors.File, name string) []int {
	t.Helper()
	x, _, err := f.Int64(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}

// closeElementwise checks max |got−want| ≤ tol·(1+|want|) and names the tensor.
func closeElementwise(t testing.TB, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	worst, at := 0.0, 0
	for i := range want {
		d := math.Abs(float64(got[i]-want[i])) / (1 + math.Abs(float64(want[i])))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	if worst > tol || math.IsNaN(worst) {
		t.Fatalf("%s: max relative error %.3g at %d (got %v, want %v), tolerance %g", name, worst, at, got[at], want[at], tol)
	}
}

func TestTinyForwardMatchesFixture(t *testing.T) {
	w := loadTinyOpenAI(t)
	fx := readFixture(t, "../testdata/clip-tiny/forward.safetensors")
	m := New(w)
	images := f32(t, fx, "images")
	tokens := ints(t, fx, "tokens")
	img := m.EncodeImage(images, 3)
	closeElementwise(t, "image_features", img, f32(t, fx, "image_features"), 1e-4)
	txt, err := m.EncodeText(tokens, 4)
	if err != nil {
		t.Fatal(err)
	}
	closeElementwise(t, "text_features", txt, f32(t, fx, "text_features"), 1e-4)
	logits := Logits(img, txt, 3, 4, 64, w.LogitScale)
	closeElementwise(t, "logits_per_image", logits, f32(t, fx, "logits_per_image"), 1e-4)
}

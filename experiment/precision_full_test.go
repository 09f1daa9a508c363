package experiment

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/protocol"
)

// TestBF16FullBackprop guards engine.precision: bf16 for the methods that
// backpropagate through every frozen block (CLIP-LoRA: LoRA on q, k, v of
// every block of both encoders; ADAPT: visual prompts through the image
// encoder, text prompts through the text encoder) on the world jobs whose
// guards they have, on those guards' metrics: Local on world-compare (each
// method with its recipe, evaluated at the last round, as
// TestWorldCompareQualities) and the unseen style's accuracy on world-dg
// (TestWorldDGUnseenStyle). bf16 must be within 0.5 points of float32 there;
// the other metrics are logged (they move by a few test images when the
// bfloat16 rounding changes the training trajectory).
func TestBF16FullBackprop(t *testing.T) {
	for _, c := range []struct {
		preset string
		sets   []string
		guard  map[string]string // method → guarded metric
	}{
		{"world-compare", []string{"methods=[clip_lora,adapt]", "federation.eval_every=5"},
			map[string]string{"clip_lora": "local", "adapt": "local"}},
		{"world-dg", []string{"methods=[adapt]"}, map[string]string{"adapt": protocol.GlobalMetric}},
	} {
		fp32 := runPreset(t, c.preset, c.sets...)
		bf16 := runPreset(t, c.preset, append(c.sets, "engine.precision=bf16")...)
		for method, key := range c.guard {
			f, ok := fp32.Summary.Get(method)
			if !ok {
				t.Fatalf("%s: fp32 run lacks %s", c.preset, method)
			}
			b, ok := bf16.Summary.Get(method)
			if !ok {
				t.Fatalf("%s: bf16 run lacks %s", c.preset, method)
			}
			for k, v := range f {
				t.Logf("%s %s %s: fp32 %.2f bf16 %.2f", c.preset, method, k, v, b[k])
			}
			v, ok := f[key]
			if !ok {
				t.Fatalf("%s %s has no %q metric: %v", c.preset, method, key, f)
			}
			if math.Abs(v-b[key]) > 0.5 {
				t.Errorf("%s %s %s: bf16 %.2f is more than 0.5 points from fp32 %.2f", c.preset, method, key, b[key], v)
			}
		}
	}
}

package experiment

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/config"
)

// TestBF16DefaultJob guards the opt-in bf16 frozen path on the default
// world job: every metric of every method within 0.5 points of float32.
func TestBF16DefaultJob(t *testing.T) {
	fp32 := defaultJob.get(t, config.DefaultPreset)
	bf16 := runPreset(t, config.DefaultPreset, "engine.precision=bf16")
	for _, r := range fp32.Summary.Methods {
		b, ok := bf16.Summary.Get(r.Method)
		if !ok {
			t.Fatalf("bf16 run lacks %s", r.Method)
		}
		for k, v := range r.Metrics {
			t.Logf("%s %s: fp32 %.2f bf16 %.2f", r.Method, k, v, b[k])
			if math.Abs(v-b[k]) > 0.5 {
				t.Errorf("%s %s: bf16 %.2f is more than 0.5 points from fp32 %.2f", r.Method, k, b[k], v)
			}
		}
	}
}

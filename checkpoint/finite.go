package checkpoint

import (
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/clip"
)

// CheckFinite reports the first tensor of w holding NaN or ±Inf, named as
// in OpenAI/open_clip checkpoints with the index of the bad value, or nil
// when every weight is finite. A model with such weights computes NaN
// scores that would otherwise print as accuracies.
func CheckFinite(w *clip.Weights) error {
	if err := Validate(w); err != nil {
		return err
	}
	for _, p := range layout(w.Config, OpenAI, w, []float32{w.LogitScale}) {
		for i, v := range p.dst {
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("checkpoint: tensor %q holds %v at index %d; the weights are damaged", p.name, v, i)
			}
		}
	}
	return nil
}

package robust

import (
	"math"
	"testing"
)

// TestWrapRejectsNonFinite: NaN and ±Inf in the trim, the clip norm and
// the DP parameters are refused (before: NaN passed `x < 0` checks and
// +Inf the positivity checks).
func TestWrapRejectsNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, o := range []Options{
		{Rule: TrimmedMean, Trim: nan}, {ClipNorm: nan},
		{DP: &DP{Clip: inf, NoiseMultiplier: 1, Delta: 1e-5}}, {DP: &DP{Clip: 1, NoiseMultiplier: inf, Delta: 1e-5}},
		{DP: &DP{Clip: nan, NoiseMultiplier: 1, Delta: 1e-5}}, {DP: &DP{Clip: 1, NoiseMultiplier: 1, Delta: nan}},
	} {
		if _, err := Wrap(fedavg([]float32{0}), o); err == nil {
			t.Errorf("Wrap(%+v) succeeded", o)
		}
	}
	if _, err := Wrap(fedavg([]float32{0}), Options{DP: &DP{Clip: 1, NoiseMultiplier: 1, Delta: 1e-5}}); err != nil {
		t.Errorf("valid DP refused: %v", err)
	}
}

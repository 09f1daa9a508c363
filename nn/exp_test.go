package nn

import (
	"math"
	"testing"
)

func TestExpfAccuracy(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x < 88; x += 0.0137 {
		want := math.Exp(float64(x))
		got := float64(Expf(x))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 5e-7 {
		t.Fatalf("Expf max relative error %.3g > 5e-7", worst)
	}
	if Expf(-100) != 0 || !math.IsInf(float64(Expf(100)), 1) {
		t.Fatalf("Expf saturation: %v %v", Expf(-100), Expf(100))
	}
}

func BenchmarkExpf(b *testing.B) {
	var s float32
	for i := 0; i < b.N; i++ {
		s += Expf(float32(i%100) * -0.01)
	}
	_ = s
}

func BenchmarkQuickGELUForward(b *testing.B) {
	n := 1 << 20
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i%200)/20 - 5
	}
	b.SetBytes(int64(4 * n))
	for i := 0; i < b.N; i++ {
		QuickGELUForward(y, x, n)
	}
}

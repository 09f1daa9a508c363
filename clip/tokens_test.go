package clip

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestImageTokensClassRow checks that the class-token row of
// EncodeImageTokens is EncodeImage's feature and that the patch rows differ.
func TestImageTokensClassRow(t *testing.T) {
	c := tinyConfig()
	m := New(Random(c, 3))
	rng := rand.New(rand.NewPCG(5, 6))
	const B = 2
	S := c.Vision.ImageSize
	px := make([]float32, B*3*S*S)
	for i := range px {
		px[i] = float32(rng.NormFloat64())
	}
	want := m.EncodeImage(px, B)
	got := m.EncodeImageTokens(px, B)
	T, E := c.Vision.Tokens(), c.EmbedDim
	if len(got) != B*T*E {
		t.Fatalf("%d values, want %d", len(got), B*T*E)
	}
	var same float64
	for b := 0; b < B; b++ {
		for k := 0; k < E; k++ {
			d := math.Abs(float64(got[b*T*E+k] - want[b*E+k]))
			if d > 1e-5*(1+math.Abs(float64(want[b*E+k]))) {
				t.Fatalf("image %d class row [%d] = %v, EncodeImage %v", b, k, got[b*T*E+k], want[b*E+k])
			}
			same = math.Max(same, math.Abs(float64(got[b*T*E+E+k]-want[b*E+k])))
		}
	}
	if same == 0 {
		t.Error("patch row 1 equals the class row")
	}
}

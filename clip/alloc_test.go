package clip

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// TestSteadyStateAllocations: once the buffers have grown, a training
// forward and backward through the encoders allocates (almost) nothing —
// activations are reused, not reallocated per call.
func TestSteadyStateAllocations(t *testing.T) {
	c := ViTB16()
	c.Vision = VisionConfig{ImageSize: 64, PatchSize: 16, Width: 256, Layers: 3, Heads: 4, MLPWidth: 1024}
	c.Text = TextConfig{ContextLength: 16, VocabSize: 50, Width: 64, Layers: 2, Heads: 1, MLPWidth: 256}
	c.EmbedDim = 32
	m := New(Random(c, 1))
	rng := rand.New(rand.NewPCG(1, 2))
	B := 16
	T := c.Vision.Tokens()
	x := gradcheck.Rand(rng, B*T*c.Vision.Width, 1)
	feat := make([]float32, B*c.EmbedDim)
	dfeat := gradcheck.Rand(rng, B*c.EmbedDim, 1)
	dx := make([]float32, len(x))
	step := func() {
		pooled := m.Vision.Stack.Forward(x, B, T, 0, 3, ClassPool(B), true)
		m.Vision.HeadForward(feat, pooled, B)
		dpool := m.Vision.HeadBackward(dfeat)
		m.Vision.Stack.Backward(dx, dpool)
		m.Vision.Stack.Forward(x, B, T, 0, 3, ClassPool(B), false)
	}
	step()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const calls = 5
	for i := 0; i < calls; i++ {
		step()
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	activations := uint64(B * T * c.Vision.Width * 4)
	if perCall > activations/4 {
		t.Fatalf("a steady-state step allocates %d bytes; one activation tensor is %d bytes", perCall, activations)
	}
	t.Logf("steady-state step allocates %d bytes (one activation tensor: %d)", perCall, activations)
}

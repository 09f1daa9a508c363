package kgcoop

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
)

// TestGradCheck compares the context's gradient with central differences of
// the loss along random directions, from init_rand (where the pull term has
// a gradient) with w = 8 and with w = 80 (the pull term dominating).
func TestGradCheck(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init_rand.safetensors")
	ref, meta := paritytest.Read(t, dir+"step_rand.safetensors")
	for _, w := range []string{"8", "80"} {
		meta["w"] = w
		l, _, err := replay(ref).Learner(m, init, ref, meta, false)
		if err != nil {
			t.Fatal(err)
		}
		img := ref["image_features"].Data
		labels, err := prompt.Ints(ref, "labels")
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 {
			v, _, _, err := l.Step(img, labels)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		_, terms, _, _ := l.Step(img, labels)
		if !(terms["score"] > 0) {
			t.Fatalf("w %s: score %v, want > 0 away from the init", w, terms["score"])
		}
		methodtest.Directional(t, "w "+w+" ctx", l.ctx.Data, l.grad.Clone().Data, loss, rand.New(rand.NewPCG(2, 2)))
	}
}

package prompt

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

func TestCosinesGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const R, E = 4, 5
	a, b := gradcheck.Rand(rng, R*E, 1), gradcheck.Rand(rng, R*E, 1)
	w := gradcheck.Rand(rng, R, 1)
	cos := make([]float32, R)
	loss := func() float64 { Cosines(cos, a, b, R, E); return gradcheck.Dot(cos, w) }
	da, db := make([]float32, R*E), make([]float32, R*E)
	CosinesBackward(da, db, w, a, b, R, E)
	for _, c := range []struct {
		name    string
		p, grad []float32
	}{{"a", a, da}, {"b", b, db}} {
		if err := gradcheck.Check(c.name, c.p, c.grad, loss, 1e-3, 1e-2, R*E, rng); err != nil {
			t.Error(err)
		}
	}
	// nil receivers are skipped, and gradients accumulate
	db2 := append([]float32(nil), db...)
	CosinesBackward(nil, db2, w, a, b, R, E)
	for i := range db {
		if d := db2[i] - 2*db[i]; d > 1e-6 || d < -1e-6 {
			t.Fatalf("db[%d]: second call did not accumulate (%v vs 2×%v)", i, db2[i], db[i])
		}
	}
}

func TestCosineCEGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	const B, C, E = 5, 3, 4
	img, txt := gradcheck.Rand(rng, B*E, 1), gradcheck.Rand(rng, C*E, 1)
	labels := []int{0, 2, 1, 1, 0}
	var ce CosineCE
	loss := func() float64 {
		l, _, _, err := ce.Loss(img, txt, B, C, E, 1.5, labels)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	_, _, d, err := ce.Loss(img, txt, B, C, E, 1.5, labels)
	if err != nil {
		t.Fatal(err)
	}
	grad := append([]float32(nil), d...)
	if err := gradcheck.Check("txt", txt, grad, loss, 1e-3, 1e-2, C*E, rng); err != nil {
		t.Error(err)
	}
	if _, _, _, err := ce.Loss(img, txt, B, C, E, 1.5, []int{0, 1, 2, 3, 0}); err == nil {
		t.Error("label 3 of 3 classes: no error")
	}
}

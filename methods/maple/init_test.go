package maple

import (
	"math"
	"slices"
	"testing"
)

// TestInitDraw: ctx and the deep text prompts start as draws of
// N(0, init_std²) (pooled sample standard deviation within 30%); every
// coupling's weight and bias lie in nn.Linear's U(±1/√Dt) and reach past
// 0.7 of the bound on both sides (64 draws per weight); the deep couplings
// start as copies of the first (the authors' _get_clones).
func TestInitDraw(t *testing.T) {
	m, tokens := randomModel(3, 2)
	const std = 0.02
	l, err := New(m, tokens, Config{NCtx: 2, Depth: 3, InitStd: std, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	var ss float64
	var n int
	for _, name := range []string{ParamCtx, ParamText(1), ParamText(2)} {
		for _, v := range l.p[name].Data {
			ss += float64(v) * float64(v)
			n++
		}
	}
	if sd := math.Sqrt(ss / float64(n)); math.Abs(sd-std) > 0.3*std {
		t.Errorf("prompts' standard deviation %g, want init_std %g", sd, std)
	}
	bound := 1 / math.Sqrt(float64(l.Dt))
	for _, name := range []string{ParamProjW, ParamProjB, ParamCouple(1, "weight"), ParamCouple(1, "bias")} {
		d := l.p[name].Data
		lo, hi := float64(slices.Min(d)), float64(slices.Max(d))
		if lo < -bound || hi > bound {
			t.Errorf("%s: values in [%g, %g], outside U(±%g)", name, lo, hi, bound)
		}
		if len(d) >= 64 && (lo > -0.7*bound || hi < 0.7*bound) {
			t.Errorf("%s: values in [%g, %g], not spread over U(±%g)", name, lo, hi, bound)
		}
	}
	for _, what := range []string{"weight", "bias"} {
		if !slices.Equal(l.p[ParamCouple(2, what)].Data, l.p[ParamCouple(1, what)].Data) {
			t.Errorf("coupling 2's %s is not a copy of coupling 1's", what)
		}
	}
	if slices.Equal(l.p[ParamProjW].Data, l.p[ParamCouple(1, "weight")].Data) {
		t.Error("the first coupling is a copy of proj")
	}
}

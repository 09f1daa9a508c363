package fedot

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestSettingsCheckBlocks: one block is valid for every variant; more
// blocks only for the orthogonal ones, the refusal naming blocks.
func TestSettingsCheckBlocks(t *testing.T) {
	for _, tc := range []struct {
		variant string
		blocks  int
		bad     bool
	}{
		{VariantFedLT, 1, false}, {VariantFedAdapter, 1, false}, {VariantFedOT, 1, false},
		{VariantFedLT, 2, true}, {VariantFedAdapter, 2, true}, {VariantFedOT, 2, false},
		{VariantAllGlobal, 4, false}, {VariantFedOT, 0, true},
	} {
		s := &Settings{Variant: tc.variant, Blocks: tc.blocks, Init: "text"}
		err := config.CheckSection("fedot", s)
		if tc.bad != (err != nil) || (tc.bad && !strings.Contains(err.Error(), "fedot.blocks")) {
			t.Errorf("%s with %d blocks: %v", tc.variant, tc.blocks, err)
		}
	}
}

// TestTrainOptionsLR: fedot.lr replaces the run's optimizer.lr and scales
// its schedule by lr/optimizer.lr (rates by hand); lr 0 leaves the run's
// options alone, and a schedule with optimizer.lr 0 is not scaled.
func TestTrainOptionsLR(t *testing.T) {
	sched := optim.Constant(0.05)
	run := train.Options{LR: 0.05, Schedule: sched, Epochs: 1}
	got := (&Settings{LR: 0.5}).trainOptions(run)
	if got.LR != 0.5 || math.Abs(got.Rate(3, 0)-0.5) > 1e-12 {
		t.Errorf("lr 0.5 over 0.05: lr %g, rate %g, want 0.5 and 0.5", got.LR, got.Rate(3, 0))
	}
	got = (&Settings{}).trainOptions(run)
	if got.LR != 0.05 || got.Schedule != sched {
		t.Errorf("lr 0: options changed: %+v", got)
	}
	zero := train.Options{LR: 0, Schedule: sched, Epochs: 1}
	got = (&Settings{LR: 0.5}).trainOptions(zero)
	if got.LR != 0.5 || got.Schedule != sched {
		t.Errorf("optimizer.lr 0: %+v, want lr 0.5 and the schedule unscaled", got)
	}
}

// TestShapesAndInit: the parameters' shapes for d = 8 and K = 3 by hand,
// and their initial values: X = I per block, W = I, FedAdapter's Down
// U(−1/√d, 1/√d) (spread over the interval) and Up 0; the random
// classifier U(−1/√d, 1/√d).
func TestShapesAndInit(t *testing.T) {
	const d, K = 8, 3
	for _, tc := range []struct {
		s    *Settings
		want map[string][]int
	}{
		{&Settings{Variant: VariantFedOT, Blocks: 2}, map[string][]int{ParamClassifier: {K, d}, ParamX: {2, 4, 4}}},
		{&Settings{Variant: VariantFedLT, Blocks: 1}, map[string][]int{ParamClassifier: {K, d}, ParamLinear: {d, d}}},
		{&Settings{Variant: VariantFedAdapter, Blocks: 1}, map[string][]int{ParamClassifier: {K, d}, ParamDown: {2, d}, ParamUp: {d, 2}}},
	} {
		shapes := tc.s.Shapes(d, K)
		if len(shapes) != len(tc.want) {
			t.Errorf("%s: shapes %v, want %v", tc.s.Variant, shapes, tc.want)
		}
		for name, w := range tc.want {
			if !tensor.SameShape(shapes[name], w) {
				t.Errorf("%s: %s shape %v, want %v", tc.s.Variant, name, shapes[name], w)
			}
		}
	}
	if got := (&Settings{Variant: VariantFedAdapter}).Shapes(3, 2)[ParamDown]; !tensor.SameShape(got, []int{1, 3}) {
		t.Errorf("FedAdapter on 3-d features: down %v, want [1 3] (width at least 1)", got)
	}

	p := tensor.Named{ParamX: tensor.New(2, 4, 4), ParamLinear: tensor.New(d, d), ParamDown: tensor.New(64, d), ParamUp: tensor.New(d, 64)}
	for i := range p[ParamUp].Data {
		p[ParamUp].Data[i] = 7
	}
	(&Settings{}).initLocal(p, rand.New(rand.NewPCG(1, 2)))
	for j := 0; j < 2; j++ {
		for a := 0; a < 4; a++ {
			for b := 0; b < 4; b++ {
				want := float32(0)
				if a == b {
					want = 1
				}
				if p[ParamX].Data[j*16+a*4+b] != want {
					t.Fatalf("X[%d][%d][%d] = %g, want the identity", j, a, b, p[ParamX].Data[j*16+a*4+b])
				}
			}
		}
	}
	for a := 0; a < d; a++ {
		for b := 0; b < d; b++ {
			want := float32(0)
			if a == b {
				want = 1
			}
			if p[ParamLinear].Data[a*d+b] != want {
				t.Fatalf("W[%d][%d] = %g, want the identity", a, b, p[ParamLinear].Data[a*d+b])
			}
		}
	}
	for _, v := range p[ParamUp].Data {
		if v != 0 {
			t.Fatal("Up not zero")
		}
	}
	checkUniform(t, "down", p[ParamDown].Data, 1/math.Sqrt(d))
	wg := tensor.New(64, d)
	uniform(wg.Data, rand.New(rand.NewPCG(3, 4)), 1/math.Sqrt(d))
	checkUniform(t, "random w_g", wg.Data, 1/math.Sqrt(d))
}

// checkUniform: x lies in (−bound, bound) and spreads over it (both signs,
// max |x| above 0.9·bound, mean square near bound²/3).
func checkUniform(t *testing.T, name string, x []float32, bound float64) {
	t.Helper()
	var mx, ms float64
	neg := 0
	for _, v := range x {
		mx = math.Max(mx, math.Abs(float64(v)))
		ms += float64(v) * float64(v)
		if v < 0 {
			neg++
		}
	}
	ms /= float64(len(x))
	if mx >= bound || mx < 0.9*bound || neg < len(x)/4 || neg > 3*len(x)/4 || math.Abs(ms/(bound*bound/3)-1) > 0.2 {
		t.Errorf("%s: max |x| %g, %d of %d negative, mean square %g; want U(−%g, %g)", name, mx, neg, len(x), ms, bound, bound)
	}
}

package conformance

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/tensor"
)

// tbRecorder is a testing.TB that collects the errors of a check instead of
// failing the test; Fatal ends the check's goroutine.
type tbRecorder struct {
	testing.TB
	errs []string
}

func (r *tbRecorder) Helper()                   {}
func (r *tbRecorder) Logf(string, ...any)       {}
func (r *tbRecorder) Log(...any)                {}
func (r *tbRecorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *tbRecorder) Error(a ...any)            { r.errs = append(r.errs, fmt.Sprint(a...)) }
func (r *tbRecorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }
func (r *tbRecorder) Fatal(a ...any)            { r.Error(a...); runtime.Goexit() }

// record runs check against a tbRecorder and returns its errors.
func record(t *testing.T, check func(tb testing.TB)) []string {
	r := &tbRecorder{TB: t}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); check(r) }()
	wg.Wait()
	return r.errs
}

// broken is a Stepper whose gradient of one tensor is mutated.
type broken struct {
	fixture.Stepper
	grad string
	mut  func(float32) float32
}

func (b broken) Step(ctx context.Context, f *fixture.Fixture) (tensor.Named, error) {
	out, err := b.Stepper.Step(ctx, f)
	if err != nil {
		return nil, err
	}
	if g := out[b.grad]; g != nil {
		g = g.Clone()
		for i, v := range g.Data {
			g.Data[i] = b.mut(v)
		}
		out[b.grad] = g
	}
	return out, nil
}

// smallestGrad is the reference gradient of step file batch with the
// smallest largest entry, among those above 1e-6 of the largest entry of
// all (below that a reference gradient is float rounding of an inert
// tensor's, such as pFedMoAP's gate key bias).
func smallestGrad(t *testing.T, model *clip.Model, params, batch string) string {
	t.Helper()
	f, err := fixture.Load(model, params, []string{batch}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := f.Batch
	scale := map[string]float64{}
	var top float64
	for k, v := range ts {
		if strings.HasPrefix(k, "grad.") {
			scale[k] = maxAbs(v.Data)
			top = math.Max(top, scale[k])
		}
	}
	best, bs := "", math.Inf(1)
	for k, s := range scale {
		if s > 1e-6*top && (s < bs || s == bs && k < best) {
			best, bs = k, s
		}
	}
	if best == "" {
		t.Fatalf("%s holds no gradient", batch)
	}
	return best
}

// TestStepContractCatchesBrokenGradients: on every step fixture of every
// method, halving, zeroing or flipping the sign of the gradient of the
// tensor with the smallest gradients (FedMVP's LoRA factors, pFedMoAP's
// gate weights) makes the step contract's gradient checks fail — not
// merely its check of step1, which the mutation leaves alone.
func TestStepContractCatchesBrokenGradients(t *testing.T) {
	// a check of the checks: it does not depend on the GEMM (the main pass
	// runs it)
	skipPureGo(t)
	w, _, err := checkpoint.Load(testdata + "clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	forEach(t, func(t *testing.T, name string) {
		m, _ := methods.Get(name)
		st, ok := m.(fixture.Stepper)
		fx := stepFixtures(name)
		if !ok || len(fx) == 0 {
			t.Skipf("%s: no step fixture (TestStepContract fails it)", name)
		}
		for _, p := range fx {
			params, batch := p[0], p[1]
			t.Run(filepath.Base(batch), func(t *testing.T) { checkCatches(t, w, st, params, batch) })
		}
	})
}

// checkCatches breaks the gradient of the smallest tensor of step file
// batch three ways and expects the step contract's gradient checks to
// fail each time, after the unbroken step passes them.
func checkCatches(t *testing.T, w *clip.Weights, st fixture.Stepper, params, batch string) {
	muts := map[string]func(float32) float32{
		"halved":  func(v float32) float32 { return v / 2 },
		"zeroed":  func(float32) float32 { return 0 },
		"flipped": func(v float32) float32 { return -v },
	}
	grad := smallestGrad(t, clip.New(w), params, batch)
	// the unbroken step passes the recorded checks: what the broken
	// ones report is the mutation
	if errs := record(t, func(tb testing.TB) { checkStep(tb, clip.New(w), st, surrogate(st), params, batch) }); len(errs) > 0 {
		t.Fatalf("the unbroken step fails: %q", errs)
	}
	for _, kind := range []string{"halved", "zeroed", "flipped"} {
		bad := broken{Stepper: st, grad: grad, mut: muts[kind]}
		errs := record(t, func(tb testing.TB) { checkStep(tb, clip.New(w), bad, surrogate(st), params, batch) })
		caught := false
		for _, e := range errs {
			caught = caught || !strings.HasPrefix(e, "step1.")
		}
		if !caught {
			t.Errorf("%s %s: the step contract's gradient checks pass (errors: %q)", kind, grad, errs)
		} else {
			t.Logf("%s %s: %s", kind, grad, errs[0])
		}
	}
}

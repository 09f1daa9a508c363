package conformance

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
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
	parity.Stepper
	grad string
	mut  func(float32) float32
}

func (b broken) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
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

// memoStepper computes each distinct step once: it answers a Step on
// inputs it has seen (parameters, batch, metadata, bit for bit) with a
// copy of that step's output, so that every mutation of a sweep replays
// the unbroken step instead of recomputing it.
type memoStepper struct {
	parity.Stepper
	seen map[uint64]tensor.Named
}

func (m *memoStepper) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	k := inputsKey(f)
	if out, ok := m.seen[k]; ok {
		return maps.Clone(out), nil // the checks only read the tensors; broken replaces its own
	}
	out, err := m.Stepper.Step(ctx, f)
	if err != nil {
		return nil, err
	}
	m.seen[k] = out.Clone()
	return out, nil
}

// inputsKey hashes a step's inputs: its parameters, batch tensors,
// integer tensors and metadata, names and values.
func inputsKey(f *parity.Fixture) uint64 {
	h := fnv.New64a()
	var buf []byte
	for _, n := range []tensor.Named{f.Params, f.Batch} {
		for _, k := range slices.Sorted(maps.Keys(n)) {
			buf = append(buf[:0], k...)
			buf = binary.LittleEndian.AppendUint64(buf, uint64(len(n[k].Data)))
			for _, v := range n[k].Data {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
			h.Write(buf)
		}
		h.Write([]byte{0xff})
	}
	for _, k := range slices.Sorted(maps.Keys(f.Ints)) {
		buf = append(buf[:0], k...)
		for _, v := range f.Ints[k] {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
		}
		h.Write(buf)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Meta)) {
		io.WriteString(h, k+"="+f.Meta[k]+"\x00")
	}
	return h.Sum64()
}

// liveGrads are the parameters of step file batch whose reference
// gradient's largest entry is above 1e-6 of the largest entry of all
// (below that a reference gradient is float rounding of an inert
// tensor's, such as pFedMoAP's gate key bias), sorted, and the others
// (those below, and those without a reference gradient, such as FedMVP's
// cross-attention context norm before the switch to LoRA).
func liveGrads(t *testing.T, model *clip.Model, params, batch string) (live, inert []string) {
	t.Helper()
	f, err := parity.Load(model, params, []string{batch}, nil)
	if err != nil {
		t.Fatal(err)
	}
	scale := map[string]float64{}
	var top float64
	for p := range f.Params {
		if g := f.Batch["grad."+p]; g != nil {
			scale[p] = maxAbs(g.Data)
			top = math.Max(top, scale[p])
		} else {
			scale[p] = -1 // no reference gradient: no path to the loss
		}
	}
	for _, p := range slices.Sorted(maps.Keys(scale)) {
		if scale[p] > 1e-6*top {
			live = append(live, p)
		} else {
			inert = append(inert, p)
		}
	}
	if len(live) == 0 {
		t.Fatalf("%s holds no gradient", batch)
	}
	return live, inert
}

// mutations break a gradient three ways.
var mutations = []struct {
	name string
	mut  func(float32) float32
}{
	{"halved", func(v float32) float32 { return v / 2 }},
	{"zeroed", func(float32) float32 { return 0 }},
	{"flipped", func(v float32) float32 { return -v }},
}

// sweepWhy is why the sweep runs the step contract without finite
// differences: the checks that catch are its comparison of each tensor's
// gradient with the reference's (checkGrad), and finite differences would
// recompute the step for every mutation.
const sweepWhy = "mutation sweep: every gradient against the reference's, relative to its own scale"

// TestStepContractCatchesBrokenGradients: on every step fixture of every
// method, halving, zeroing or flipping the sign of the gradient of any one
// tensor (every tensor whose reference gradient is above 1e-6 of the
// largest; FedMVP's LoRA factors and pFedMoAP's gate weights included)
// makes the step contract's gradient check of that tensor fail — not
// merely its check of step1, which the mutation leaves alone. Each
// distinct step is computed once (memoStepper); the table of what was
// caught, one line per method, ends the test's log.
func TestStepContractCatchesBrokenGradients(t *testing.T) {
	// a check of the checks: it does not depend on the GEMM (the main pass
	// runs it)
	skipPureGo(t)
	w, _, err := checkpoint.Load(testdata + "clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	forEach(t, func(t *testing.T, name string) {
		m, _ := methods.Get(name)
		st, ok := parity.StepperOf(m)
		fx := stepFixtures(name)
		if !ok || len(fx) == 0 {
			t.Fatalf("%s: no step fixture (TestStepContract fails it)", name)
		}
		caught, inert := 0, 0
		for _, p := range fx {
			params, batch := p[0], p[1]
			t.Run(filepath.Base(batch), func(t *testing.T) {
				c, n := checkCatches(t, w, st, params, batch)
				caught, inert = caught+c, inert+n
			})
		}
		line := fmt.Sprintf("%s: %d tensors × 3 mutations caught (%d step fixtures", name, caught, len(fx))
		if inert > 0 {
			line += fmt.Sprintf("; %d inert tensors, without a reference gradient or below 1e-6 of the largest, skipped", inert)
		}
		table = append(table, line+")")
	})
	t.Logf("gradient mutations caught by the step contract, per method:\n%s", strings.Join(table, "\n"))
}

// checkCatches breaks the gradient of every live tensor of step file batch
// three ways and expects the step contract's gradient check of that tensor
// to fail each time, after the unbroken step passes the contract; it
// returns the number of tensors whose three mutations were all caught and
// the number of inert tensors skipped.
func checkCatches(t *testing.T, w *clip.Weights, st parity.Stepper, params, batch string) (caught, inert int) {
	live, dead := liveGrads(t, clip.New(w), params, batch)
	skip := map[string]bool{}
	for _, p := range dead {
		skip[p] = true
	}
	memo := &memoStepper{Stepper: st, seen: map[uint64]tensor.Named{}}
	check := func(tb testing.TB, st parity.Stepper) {
		checkStepInert(tb, clip.New(w), st, sweepWhy, params, batch, skip)
	}
	// the unbroken step passes the recorded checks: what the broken
	// ones report is the mutation
	if errs := record(t, func(tb testing.TB) { check(tb, memo) }); len(errs) > 0 {
		t.Fatalf("the unbroken step fails: %q", errs)
	}
	for _, pname := range live {
		all := true
		for _, mu := range mutations {
			bad := broken{Stepper: memo, grad: "grad." + pname, mut: mu.mut}
			errs := record(t, func(tb testing.TB) { check(tb, bad) })
			hit := slices.IndexFunc(errs, func(e string) bool { return strings.HasPrefix(e, "grad."+pname+":") })
			if hit < 0 {
				t.Errorf("%s grad.%s: the step contract's gradient check of it passes (errors: %q)", mu.name, pname, errs)
				all = false
				continue
			}
			t.Logf("%s grad.%s: %s", mu.name, pname, errs[hit])
		}
		if all {
			caught++
		}
	}
	return caught, len(dead)
}

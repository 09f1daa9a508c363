package pfedmoap

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// The tests of this file kill mutants `make mutants` found alive in the
// fixture paths of methods/pfedmoap (issue 35).

// TestStepFromFileShapes: every output of a step has the fixture's shape
// (gate_attention [C, B, K+1] included); without experts the step writes
// no gate outputs at all.
func TestStepFromFileShapes(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/pfedmoap/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/pfedmoap/step.safetensors")
	batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "images": ref["images"]}
	out, err := StepFromFile(m, init, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range ref {
		if got := out[name]; got != nil && !slices.Equal(got.Shape, want.Shape) {
			t.Errorf("%s: shape %v, fixture %v", name, got.Shape, want.Shape)
		}
	}
	if got := out["gate_attention"]; got == nil || !slices.Equal(got.Shape, []int{5, 6, 3}) {
		t.Errorf("gate_attention %v, want shape [5 6 3]", got)
	}
	alone := maps.Clone(init)
	for name := range init {
		if strings.HasPrefix(name, "expert") {
			delete(alone, name)
		}
	}
	out, err = StepFromFile(m, alone, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nonlocal_text_features", "gate_output", "gate_attention"} {
		if _, ok := out[name]; ok {
			t.Errorf("a step without experts writes %s", name)
		}
	}
}

// roundInputs is the round fixture's input: the gate of init and the
// round file's batch.
func roundInputs(t *testing.T) (params, batch tensor.Named, meta map[string]string) {
	t.Helper()
	init, _ := paritytest.Read(t, "../../testdata/pfedmoap/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/pfedmoap/round.safetensors")
	params = tensor.Named{}
	for name, v := range init {
		if IsGate(name) {
			params[name] = v
		}
	}
	batch = tensor.Named{}
	for _, name := range []string{"pool", "global_prompt", "tokens", "client0.images", "client0.labels"} {
		batch[name] = ref[name]
	}
	return params, batch, meta
}

// TestRoundFromFileOptions: batch_size 1 is a valid size (one step per
// image), the random rule picks the first num_experts − 1 pool clients of
// the seed's permutation, a missing seed is refused, and a failing batch
// is named by its index.
func TestRoundFromFileOptions(t *testing.T) {
	m := paritytest.Model(t)
	params, batch, meta := roundInputs(t)
	one := maps.Clone(meta)
	one["batch_size"] = "1"
	out, err := RoundFromFile(m, params, batch, one)
	if err != nil {
		t.Fatalf("batch_size 1: %v", err)
	}
	if n := len(out["client0.batch_losses"].Data); n != 8 {
		t.Errorf("batch_size 1: %d steps, want 8", n)
	}
	random := maps.Clone(meta)
	random["selection"] = "random"
	out, err = RoundFromFile(m, params, batch, random)
	if err != nil {
		t.Fatalf("random selection: %v", err)
	}
	var want []float32
	for _, j := range Permutation(4, 24) {
		if j != 0 && len(want) < 2 {
			want = append(want, float32(j))
		}
	}
	if got := out["selected"].Data; !slices.Equal(got, want) {
		t.Errorf("random selection %v, want %v", got, want)
	}
	delete(random, "seed")
	if _, err := RoundFromFile(m, params, batch, random); err == nil || !strings.Contains(err.Error(), "seed") {
		t.Errorf("random selection without a seed: %v", err)
	}
	bad := maps.Clone(batch)
	labels := batch["client0.labels"].Clone()
	labels.Data[5] = 5 // n_cls is 5: batch 1 (images 4..7) fails
	bad["client0.labels"] = labels
	if _, err := RoundFromFile(m, params, bad, meta); err == nil || !strings.Contains(err.Error(), "batch 1:") {
		t.Errorf("a bad label in the second batch: %v, want an error naming batch 1", err)
	}
}

// TestFixtureRoundClientOutsidePool: the production round refuses a
// client id past the pool (N) and takes the last one (N − 1).
func TestFixtureRoundClientOutsidePool(t *testing.T) {
	m := paritytest.Model(t)
	for _, tc := range []struct {
		client string
		ok     bool
	}{{"4", false}, {"3", true}} {
		f, err := parity.Load(m, paritytest.Testdata+"pfedmoap/init.safetensors", []string{paritytest.Testdata + "pfedmoap/round.safetensors"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Meta["client"] = tc.client
		// the images and labels are client 0's; client 3 trains on them
		f.Batch["client"+tc.client+".images"] = f.Batch["client0.images"]
		f.Ints["client"+tc.client+".labels"] = f.Ints["client0.labels"]
		_, err = Method{}.FixtureRound(context.Background(), f)
		if tc.ok && err != nil {
			t.Errorf("client %s: %v", tc.client, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "has no client "+tc.client)) {
			t.Errorf("client %s: error %v, want one naming it", tc.client, err)
		}
	}
}

package experiment

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/memlimit"
)

// TestDivergingRunStops: optimizer.lr=1e30 (before: exit 0 with NaN
// metrics printed as 5.00%) makes the run fail with an error naming the
// client, the round and what went non-finite; the checkpoint of the last
// good round is left as it was.
func TestDivergingRunStops(t *testing.T) {
	model := smallModel(t)
	o := smallOptions(t, model)
	o.Methods = []string{PFedMMA}
	o.Rounds = 2
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(o.OutDir, "checkpoints", PFedMMA, federation.CheckpointFile)
	good, err := os.ReadFile(ck)
	if err != nil {
		t.Fatal(err)
	}
	// Resume for a third round with an absurd learning rate.
	o.Rounds, o.Resume, o.Train.LR = 3, true, 1e30
	_, err = Run(context.Background(), o)
	if err == nil {
		t.Fatal("lr=1e30 finished without error")
	}
	msg := err.Error()
	t.Logf("lr=1e30: %v", err)
	for _, want := range []string{"client", "round 2", "not finite"} {
		if !strings.Contains(msg, want) && !(want == "not finite" && strings.Contains(msg, "loss is")) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	after, err := os.ReadFile(ck)
	if err != nil || !bytes.Equal(good, after) {
		t.Fatalf("the last good checkpoint changed or went missing (%v)", err)
	}
	c, err := federation.FileStore{Path: ck}.Load()
	if err != nil || c.NextRound != 2 {
		t.Fatalf("checkpoint after the failure: next round %v, %v; want 2", c, err)
	}
	// A fresh run diverging in its first round fails the same way.
	f := smallOptions(t, model)
	f.Methods, f.Train.LR = []string{PFedMMA}, 1e30
	if _, err := Run(context.Background(), f); err == nil || !strings.Contains(err.Error(), "round 0") {
		t.Fatalf("fresh lr=1e30 run: error %v, want one naming round 0", err)
	}
}

// TestNaNModelRefused: a model file holding NaN (or Inf) weights is refused
// at load, naming the tensor (before: it ran and reported NaN accuracies
// printed as 5.00%).
func TestNaNModelRefused(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		dir := smallModel(t)
		file := filepath.Join(dir, "model.safetensors")
		w, _, err := checkpoint.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		w.Vision.Blocks[1].Ln1W[3] = bad
		if err := checkpoint.Save(file, w, checkpoint.OpenAI); err != nil {
			t.Fatal(err)
		}
		_, _, err = LoadModel(dir, "")
		t.Logf("%v weights: %v", bad, err)
		if err == nil || !strings.Contains(err.Error(), "visual.transformer.resblocks.1.ln_1.weight") {
			t.Errorf("model with %v weights: error %v, want one naming the tensor", bad, err)
		}
		o := smallOptions(t, dir)
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "holds") {
			t.Errorf("run on a model with %v weights: error %v", bad, err)
		}
	}
}

// TestResumeWithoutCheckpoint: --resume whose checkpoint was deleted is an
// error naming the file (before: it silently started from round 0); with
// Force it starts again from round 0.
func TestResumeWithoutCheckpoint(t *testing.T) {
	o := smallOptions(t, smallModel(t))
	o.Methods = []string{PFedMMA}
	o.Rounds = 2
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(o.OutDir, "checkpoints", PFedMMA, federation.CheckpointFile)
	if err := os.Remove(ck); err != nil {
		t.Fatal(err)
	}
	o.Resume = true
	_, err := Run(context.Background(), o)
	t.Logf("resume without checkpoint: %v", err)
	if err == nil || !strings.Contains(err.Error(), ck) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("resume without checkpoint: error %v, want one naming %s and --force", err, ck)
	}
	o.Force = true
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Records); n != 2 {
		t.Fatalf("forced resume ran %d rounds, want 2 from round 0", n)
	}
}

// TestMemoryEstimateRefuses: a run whose batch buffers cannot fit is
// refused before anything large is allocated, with the estimate, the
// available memory and the keys to lower (before: batch_size=1000000000
// ran out of memory and the kernel killed it).
func TestMemoryEstimateRefuses(t *testing.T) {
	if memlimit.AvailableMiB() <= 0 {
		t.Skip("/proc/meminfo MemAvailable unknown: the estimate is not checked")
	}
	o := smallOptions(t, smallModel(t))
	o.EvalBatch = 1 << 30
	_, err := Run(context.Background(), o)
	if err == nil {
		t.Fatal("eval batch of 2^30 images accepted")
	}
	t.Logf("eval batch 2^30: %v", err)
	for _, want := range []string{"this run needs about", "GiB available", "eval.batch_size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := checkMemory(memoryNeed{Model: 3 << 30}, 1024); err == nil || !strings.Contains(err.Error(), "3.0 GiB") {
		t.Errorf("checkMemory: %v", err)
	}
	if err := checkMemory(memoryNeed{Model: 1 << 20}, 1024); err != nil {
		t.Errorf("checkMemory of a fitting run: %v", err)
	}
}

// TestZeroMeansWhatConfigSays: protocol.min_samples 0 is passed on as "no
// minimum" (before: the partition read 0 as its default 10) and
// federation.eval_every 0 evaluates after the last round only (before:
// every round).
func TestZeroMeansWhatConfigSays(t *testing.T) {
	e, err := config.Compose(config.Sources{Sets: []string{"protocol.min_samples=0", "federation.eval_every=0", "federation.rounds=4"}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := FromConfig(e, smallModel(t), 1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if o.Protocol.MinSamples >= 0 {
		t.Errorf("min_samples 0 became partition minimum %d (0 there means 10)", o.Protocol.MinSamples)
	}
	if o.EvalEvery != o.Rounds {
		t.Errorf("eval_every 0 became %d for %d rounds", o.EvalEvery, o.Rounds)
	}
	// That setting evaluates the trained method once, after the last round.
	r := smallOptions(t, smallModel(t))
	r.Methods, r.Rounds = []string{PFedMMA}, 3
	r.EvalEvery = r.Rounds
	res, err := Run(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 || res.Records[0].Round != 2 {
		t.Errorf("eval_every 0: evaluated rounds %v, want only the last", res.Records)
	}
}

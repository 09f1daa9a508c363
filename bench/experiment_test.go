package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/pfedmma/pfedmma/methods/all" // the methods
)

// TestExperimentBenchmark runs a tiny whole-experiment benchmark and checks
// its accounting: phases add up, the reference speed-up follows the
// reference's images/s.
func TestExperimentBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the experiment benchmark writes and runs a ViT-B/16")
	}
	ref := &Reference{TrainImagesPerS: 2, EvalImagesPerS: 4}
	r, err := Experiment(context.Background(), ExperimentOptions{Rounds: 2, Clients: 2, Shots: 2, Classes: 4, TestPerClass: 3, Dir: t.TempDir(), Reference: ref})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rounds) != 2 || r.SecondsPerRound <= 0 || r.GFLOPPerRound <= 0 || r.CacheFillSeconds <= 0 {
		t.Fatalf("result %+v", r)
	}
	if sum := r.TrainSecondsPerRound + r.EvalSecondsPerRound + r.AggSecondsPerRound; sum > r.SecondsPerRound*1.05+0.01 {
		t.Errorf("phases add up to %.3f s, the round took %.3f s", sum, r.SecondsPerRound)
	}
	// 2 clients × 2 epochs × (1 base class × 2 shots)
	if r.TrainImagesPerRound != 8 {
		t.Errorf("train images per round %d, want 8", r.TrainImagesPerRound)
	}
	want := float64(r.TrainImagesPerRound)/2 + float64(r.EvalImagesPerRound)/4
	if r.ReferencePerRound != want || r.SpeedupPerRound != want/r.SecondsPerRound {
		t.Errorf("reference %.3f s (want %.3f), speed-up %.3f", r.ReferencePerRound, want, r.SpeedupPerRound)
	}
	if r.ReferenceTrainPerRound != float64(r.TrainImagesPerRound)/2 || r.ReferenceEvalPerRound != float64(r.EvalImagesPerRound)/4 ||
		r.SpeedupTrain != r.ReferenceTrainPerRound/r.TrainSecondsPerRound || r.SpeedupEval != r.ReferenceEvalPerRound/r.EvalSecondsPerRound {
		t.Errorf("per phase: reference training %.3f s (speed-up %.3f), evaluation %.3f s (speed-up %.3f)",
			r.ReferenceTrainPerRound, r.SpeedupTrain, r.ReferenceEvalPerRound, r.SpeedupEval)
	}
	if r.Precision != "fp32" || r.EvaluatedAlone {
		t.Errorf("precision %q, evaluated alone %v: want the preset's fp32, clients together", r.Precision, r.EvaluatedAlone)
	}
	p := filepath.Join(t.TempDir(), "ref.json")
	if err := os.WriteFile(p, []byte(`{"train_images_per_s": 0, "eval_images_per_s": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReference(p); err == nil {
		t.Error("a reference with a zero rate was accepted")
	}
}

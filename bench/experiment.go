package bench

import (
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// ExperimentOptions configure the whole-experiment benchmark: the paper's
// base-to-novel recipe (pFedMMA, blocks 10–12, r 32, 2 local epochs,
// evaluation every round) at ViT-B/16 shapes on a generated CoOp-layout
// folder.
type ExperimentOptions struct {
	Rounds, Clients, Shots int
	// Classes is the number of classes of the generated dataset (half base).
	Classes int
	// TestPerClass is the number of test images per class.
	TestPerClass int
	// Dir holds the generated data and model (default: a temporary folder).
	Dir string
	// Method is the trained method (default: the paper-base2novel preset's,
	// pFedMMA).
	Method string
	// Reference, when set, holds the authors' images/s (Reference JSON).
	Reference *Reference
	// Precision of the frozen weights' products (engine.precision; the
	// preset's, float32, when unset).
	Precision string
	// EvaluateAlone evaluates every client on its own, as before the
	// clients of a method were evaluated together (the A/B baseline).
	EvaluateAlone bool
	Log           func(string)
}

// RoundTiming is one round's seconds by phase.
type RoundTiming struct {
	Round                           int
	Seconds, Fit, Aggregate, Eval   float64
	GFLOP                           float64
	TrainImages, EvalImagesEstimate int
}

// ExperimentResult is what `pfedmma bench experiment --json` prints.
type ExperimentResult struct {
	CPU       gemm.CPUInfo `json:"cpu"`
	Backend   string       `json:"backend"`
	Kernel    string       `json:"kernel"`
	Threads   int          `json:"threads"`
	Precision string       `json:"precision"`
	// EvaluatedAlone: every client evaluated on its own (no group).
	EvaluatedAlone bool `json:"evaluated_alone,omitempty"`
	// CacheFillSeconds computes every frozen prefix once (before round 0).
	CacheFillSeconds float64 `json:"cache_fill_seconds"`
	// FirstRoundSeconds includes the cache fill, as the authors' first
	// round would include nothing comparable: their every round runs the
	// full model.
	FirstRoundSeconds float64 `json:"first_round_seconds"`
	// SecondsPerRound is the median over the rounds after the first.
	SecondsPerRound      float64 `json:"seconds_per_round"`
	TrainSecondsPerRound float64 `json:"train_seconds_per_round"`
	EvalSecondsPerRound  float64 `json:"eval_seconds_per_round"`
	AggSecondsPerRound   float64 `json:"aggregation_seconds_per_round"`
	GFLOPPerRound        float64 `json:"gflop_per_round"`
	TrainImagesPerRound  int     `json:"train_images_per_round"`
	EvalImagesPerRound   int     `json:"eval_images_per_round"`
	Projected50Seconds   float64 `json:"projected_50_rounds_seconds"`
	ReferencePerRound    float64 `json:"reference_seconds_per_round,omitempty"`
	SpeedupPerRound      float64 `json:"speedup_per_round,omitempty"`
	// ReferenceTrainPerRound and ReferenceEvalPerRound are the authors'
	// seconds for the round's training and evaluation images at their
	// measured images/s; SpeedupTrain and SpeedupEval divide them by ours.
	ReferenceTrainPerRound float64       `json:"reference_train_seconds_per_round,omitempty"`
	ReferenceEvalPerRound  float64       `json:"reference_eval_seconds_per_round,omitempty"`
	SpeedupTrain           float64       `json:"speedup_train,omitempty"`
	SpeedupEval            float64       `json:"speedup_eval,omitempty"`
	Rounds                 []RoundTiming `json:"rounds"`
}

// Experiment runs the benchmark.
func Experiment(ctx context.Context, o ExperimentOptions) (*ExperimentResult, error) {
	if o.Rounds < 2 {
		return nil, fmt.Errorf("bench experiment: --rounds %d: need at least 2 (the first fills the cache)", o.Rounds)
	}
	if o.Clients < 1 || o.Shots < 1 || o.Classes < 2*o.Clients {
		return nil, fmt.Errorf("bench experiment: %d clients, %d shots, %d classes: want clients ≥ 1, shots ≥ 1 and two base classes per client", o.Clients, o.Shots, o.Classes)
	}
	logf := o.Log
	if logf == nil {
		logf = func(string) {}
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "pfedmma-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	e, model, err := benchConfig(o, dir, logf)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "run")
	opts, err := experiment.FromConfig(e, model, e.Seed, out)
	if err != nil {
		return nil, err
	}
	opts.EvaluateAlone = o.EvaluateAlone
	res := &ExperimentResult{CPU: gemm.CPU(), Backend: gemm.Backend(), Kernel: gemm.CoreName(), Threads: gemm.Threads(),
		Precision: opts.Precision.String(), EvaluatedAlone: o.EvaluateAlone}
	gemm.EnableStats(true)
	defer gemm.EnableStats(false)
	last := gemm.ReadStats()
	opts.OnRound = func(_ string, r federation.RoundReport) {
		st := gemm.ReadStats()
		res.Rounds = append(res.Rounds, RoundTiming{Round: r.Round, Seconds: r.Seconds, Fit: r.FitSeconds,
			Aggregate: r.AggregateSeconds, Eval: r.EvalSeconds, GFLOP: float64(st.Flops-last.Flops) / 1e9})
		last = st
		logf(fmt.Sprintf("round %d: %.2f s (train %.2f, aggregation %.4f, evaluation %.2f)", r.Round, r.Seconds, r.FitSeconds, r.AggregateSeconds, r.EvalSeconds))
	}
	run, err := experiment.Run(ctx, opts)
	if err != nil {
		return nil, err
	}
	res.CacheFillSeconds = run.Summary.Timings["prefix_s"]
	if len(res.Rounds) < 2 {
		return nil, fmt.Errorf("bench experiment: %d rounds timed", len(res.Rounds))
	}
	if err := res.summarize(opts, e.Federation.LocalEpochs, o.Reference); err != nil {
		return nil, err
	}
	return res, nil
}

// benchConfig writes a random ViT-B/16 and a CoOp DTD-layout folder of
// o's size into dir and returns the paper-base2novel preset on them: o's
// method (default: the preset's trained one), clients and rounds, every
// round evaluated, no augmentation.
func benchConfig(o ExperimentOptions, dir string, logf func(string)) (*config.Experiment, string, error) {
	logf("writing a random ViT-B/16 and a CoOp DTD-layout folder")
	model, err := writeViTB16(filepath.Join(dir, "model"))
	if err != nil {
		return nil, "", err
	}
	root := filepath.Join(dir, "DATA")
	if err := writeDTD(root, o.Classes, o.Shots, o.TestPerClass); err != nil {
		return nil, "", err
	}
	e, err := config.Preset("paper-base2novel")
	if err != nil {
		return nil, "", err
	}
	method := o.Method
	if method == "" {
		// the preset's one trained method (pFedMMA)
		if method, err = experiment.TrainedMethod(e.Methods); err != nil {
			return nil, "", err
		}
	}
	e.Methods = []string{method}
	e.Model, e.Dataset.Name, e.Dataset.Root, e.Dataset.Shots = model, "dtd", root, o.Shots
	e.Federation.Clients, e.Federation.Rounds, e.Federation.EvalEvery = o.Clients, o.Rounds, 1
	e.Augment = config.Augment{Mode: config.AugmentNone}
	e.Seeds = nil
	e.Output = config.Output{}
	if o.Precision != "" {
		e.Engine.Precision = o.Precision
	}
	return e, model, e.Validate()
}

// summarize computes the per-round medians over the rounds after the
// first, the images the authors' loop pushes through the model per round
// (localEpochs over each client's images, and its test sets) and, with
// ref, the reference's time per round and the speedups.
func (res *ExperimentResult) summarize(opts experiment.Options, localEpochs int, ref *Reference) error {
	res.FirstRoundSeconds = res.CacheFillSeconds + res.Rounds[0].Seconds
	var tot, fit, agg, ev, gf []float64
	for _, r := range res.Rounds[1:] {
		tot, fit, agg, ev, gf = append(tot, r.Seconds), append(fit, r.Fit), append(agg, r.Aggregate), append(ev, r.Eval), append(gf, r.GFLOP)
	}
	res.SecondsPerRound, res.TrainSecondsPerRound, res.AggSecondsPerRound, res.EvalSecondsPerRound = median(tot), median(fit), median(agg), median(ev)
	res.GFLOPPerRound = median(gf)
	// The images the authors' loop pushes through the model per round:
	// every client trains local_epochs over its images and evaluates its
	// test sets (Local, Base, Novel) with the full model.
	task, err := taskOf(opts)
	if err != nil {
		return err
	}
	for _, c := range task.Clients {
		res.TrainImagesPerRound += localEpochs * len(c.Train)
		for _, s := range c.Evals {
			res.EvalImagesPerRound += len(s.Images)
		}
	}
	res.Projected50Seconds = res.FirstRoundSeconds + 49*res.SecondsPerRound
	if ref != nil {
		res.ReferenceTrainPerRound = float64(res.TrainImagesPerRound) / ref.TrainImagesPerS
		res.ReferenceEvalPerRound = float64(res.EvalImagesPerRound) / ref.EvalImagesPerS
		res.ReferencePerRound = res.ReferenceTrainPerRound + res.ReferenceEvalPerRound
		res.SpeedupPerRound = res.ReferencePerRound / res.SecondsPerRound
		if res.TrainSecondsPerRound > 0 {
			res.SpeedupTrain = res.ReferenceTrainPerRound / res.TrainSecondsPerRound
		}
		if res.EvalSecondsPerRound > 0 {
			res.SpeedupEval = res.ReferenceEvalPerRound / res.EvalSecondsPerRound
		}
	}
	return nil
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// taskOf rebuilds the run's task (the partition is a function of the seed).
func taskOf(o experiment.Options) (*protocol.Task, error) {
	ds, err := dataset.Load(o.Dataset, o.Root, o.DatasetOptions)
	if err != nil {
		return nil, err
	}
	p := o.Protocol
	p.Seed = o.Seed
	return protocol.Build(ds, p)
}

// writeViTB16 writes a random ViT-B/16 CLIP (OpenAI names) with a small BPE
// vocabulary learned from the world's class prompts (the text tower's cost
// does not depend on the vocabulary size).
func writeViTB16(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		return "", err
	}
	var corpus []string
	for _, c := range w.Classes() {
		corpus = append(corpus, "a photo of a "+c.Name()+".")
	}
	tok := tokenizer.FromMerges(tokenizer.Learn(corpus, 200))
	if err := tok.WriteBPEGz(filepath.Join(dir, tokenizer.SimpleVocabGz)); err != nil {
		return "", err
	}
	cfg := clip.ViTB16()
	cfg.Text.VocabSize = tok.VocabSize()
	return dir, checkpoint.Save(filepath.Join(dir, "model.safetensors"), clip.Random(cfg, 1), checkpoint.OpenAI)
}

// writeDTD writes classes × (shots train + test) world renderings at
// 224 px in CoOp's DTD layout (the split file is generated by the loader).
func writeDTD(root string, classes, shots, test int) error {
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		return err
	}
	comps, err := w.ChooseClasses(classes, 5)
	if err != nil {
		return err
	}
	for _, c := range comps {
		folder := filepath.Join(root, "dtd", "images", c.Name())
		if err := os.MkdirAll(folder, 0o755); err != nil {
			return err
		}
		// the generated split keeps 50% for training, 20% validation,
		// 30% test: write enough images for the shots and the test set
		n := max(2*shots, (test*10+2)/3)
		for i := 0; i < n; i++ {
			img, err := w.Render(world.Spec{Split: world.TrainSplit, Class: c, Domain: world.Photo, Index: i}, 224)
			if err != nil {
				return err
			}
			f, err := os.Create(filepath.Join(folder, fmt.Sprintf("%d.png", i)))
			if err != nil {
				return err
			}
			if err := png.Encode(f, img); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
	return nil
}

package experiment

import (
	"fmt"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/protocol"
)

// FromConfig turns a validated experiment configuration into run Options for
// one seed. model is the resolved checkpoint path (the config's, or the
// embedded default); its header is read to resolve relative adapter blocks
// and the image size of generated data.
func FromConfig(e *config.Experiment, model string, seed uint64, outDir string) (Options, error) {
	if err := inputfile.CheckAny(model); err != nil {
		return Options{}, fmt.Errorf("model: %w", err)
	}
	info, err := checkpoint.Inspect(model)
	if err != nil {
		return Options{}, err
	}
	imageSize := e.Dataset.ImageSize
	if imageSize == 0 {
		imageSize = info.Config.Vision.ImageSize // generated data is rendered at the model's size
	}
	var sched optim.Schedule
	if e.Optimizer.Schedule == "cosine" {
		sched = optim.Cosine{Base: e.Optimizer.LR, Warmup: e.Optimizer.WarmupEpochs,
			Total: e.Federation.Rounds * max(e.Federation.LocalEpochs, 1)}
	}
	prec, err := gemm.ParsePrecision(e.Engine.Precision)
	if err != nil {
		return Options{}, fmt.Errorf("engine.precision: %w", err)
	}
	// Zero means what the config documents, never a hidden default:
	// protocol.min_samples 0 is no minimum (partition reads 0 as its
	// default of 10 and a negative value as none), federation.eval_every 0
	// evaluates after the last round only (the coordinator reads ≤ 1 as
	// every round).
	minSamples := e.Protocol.MinSamples
	if minSamples == 0 {
		minSamples = -1
	}
	evalEvery := e.Federation.EvalEvery
	if evalEvery == 0 {
		evalEvery = e.Federation.Rounds
	}
	codec, err := compress.Parse(e.Federation.Compress)
	if err != nil {
		return Options{}, fmt.Errorf("federation.compress: %w", err)
	}
	resolved, err := e.Resolved()
	if err != nil {
		return Options{}, err
	}
	return Options{
		ModelPath: model, VocabPath: e.Vocab, Dataset: e.Dataset.Name, Root: e.Dataset.Root,
		DatasetOptions: dataset.Options{Seed: seed, Domains: e.Dataset.Domains, ValFraction: e.Dataset.ValFraction,
			NumClasses: e.Dataset.NumClasses, ImageSize: imageSize},
		Protocol: protocol.Options{Name: e.Protocol.Name, Clients: e.Federation.Clients, Shots: e.Dataset.Shots,
			Beta: e.Protocol.Beta, PerDomain: e.Protocol.ClientsPerDomain, MinSamples: minSamples,
			UseVal: e.Eval.Split == "val", OthersBase: e.Protocol.BaseSet == "others", HeldOut: e.Protocol.HeldOut,
			Validation: e.Protocol.Validation},
		Methods: e.Methods, Sections: e.Sections, Aggregation: e.Aggregation, SecureAggregation: e.Federation.SecureAggregation,
		Train: train.Options{Epochs: e.Federation.LocalEpochs, Batch: e.BatchSize, Optimizer: e.Optimizer.Name,
			LR: e.Optimizer.LR, Momentum: e.Optimizer.Momentum, WD: e.Optimizer.WeightDecay, Schedule: sched,
			ResetOptimizer: e.Optimizer.ResetEachRound},
		DropLast: dropLastByMethod(e),
		Rounds:   e.Federation.Rounds, Fraction: e.Federation.Fraction, EvalEvery: evalEvery, Compress: codec,
		DropRate: e.Federation.ClientDropRate, PersonalEval: e.Eval.Personal,
		Augment: e.Augment.String(), Template: e.Prompt, Seed: seed, EvalBatch: e.Eval.BatchSize,
		OutDir: outDir, SaveAdapters: e.Output.SaveAdapters, Plots: e.Output.Plots, ConfigYAML: resolved,
		Precision: prec, CacheMiB: e.Cache.MemoryMiB, SpillDir: e.Cache.SpillDir, CacheBF16: e.Cache.DType == "bfloat16",
	}, nil
}

// dropLastByMethod resolves train.drop_last for each method of e.
func dropLastByMethod(e *config.Experiment) map[string]bool {
	out := make(map[string]bool, len(e.Methods))
	for _, m := range e.Methods {
		out[m] = e.DropLast(m)
	}
	return out
}

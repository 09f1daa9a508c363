package main

import (

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/bench"
)

func init() {
	var x bench.ExperimentCommand
	cmd := &cobra.Command{
		Use:   "experiment [--rounds N] [--clients N] [--shots N] [--reference FILE.json] [--json] | --preset NAME[:DATASET]... [--rounds-measured N] [--scale F] [--memory-budget MiB] [--out DIR]",
		Short: "A whole base-to-novel experiment at ViT-B/16 shapes: seconds per round by phase, FLOPs, projection",
		Long:  bench.ExperimentHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			x.Log = benchLog("bench experiment")
			return bench.RunExperiment(cmd.Context(), x, cmd.OutOrStdout())
		},
	}
	addBenchExperimentFlags(cmd, &x)
	benchCmd.AddCommand(cmd)
}

// addBenchExperimentFlags defines the flags of `bench experiment` on cmd.
func addBenchExperimentFlags(cmd *cobra.Command, x *bench.ExperimentCommand) {
	f, o, ps := cmd.Flags(), &x.Options, &x.PaperScale
	f.IntVar(&o.Rounds, "rounds", 2, "rounds (≥ 2; the first also fills the cache)")
	f.IntVar(&o.Clients, "clients", 10, "clients")
	f.IntVar(&o.Shots, "shots", 16, "training images per class")
	f.IntVar(&o.Classes, "classes", 40, "classes of the generated dataset (half base, half novel)")
	f.IntVar(&o.TestPerClass, "test-per-class", 10, "test images per class")
	f.StringVar(&x.Reference, "reference", "", "the authors' figures (JSON: train_images_per_s, eval_images_per_s, peak_rss_mib)")
	f.BoolVar(&x.JSON, "json", false, "print JSON")
	f.StringArrayVar(&ps.Presets, "preset", nil, "project this paper preset (NAME or NAME:DATASET, e.g. paper-cifar:cifar100; repeatable) from measured rounds: see Paper-scale runs in the README")
	f.IntVar(&ps.RoundsMeasured, "rounds-measured", 2, "with --preset: measured rounds (≥ 2; the first fills the cache)")
	f.Float64Var(&ps.Scale, "scale", 0.25, "with --preset: fraction of the shots and test images per class the measured run generates (classes, model, method stay the preset's)")
	f.IntVar(&ps.ClientsMeasured, "clients-measured", 2, "with --preset: clients of the measured run (0: the preset's, at most 10; at least what the method needs, e.g. pfedmoap.num_experts)")
	f.IntVar(&ps.MemoryBudgetMiB, "memory-budget", 8192, "with --preset: RAM budget of the prefix cache in MiB (cache.memory_mib); beyond it records spill to a memory-mapped file")
	f.StringVar(&x.CacheDType, "cache-dtype", "bfloat16", "with --preset: storage of the cached prefixes, bfloat16 or float32 (cache.dtype)")
	f.BoolVar(&ps.SpillCompare, "spill-compare", true, "with --preset: measure the rounds again with every cached record spilled (the spill's cost)")
	f.StringArrayVar(&x.Merge, "merge", nil, "instead of measuring: join the presets of earlier --preset runs' paperscale.json files (repeatable) into one table and plot")
	f.BoolVar(&x.Reproject, "reproject", false, "with --merge: project the saved measurements again under --memory-budget and --cache-dtype")
	f.StringVar(&x.Out, "out", "", "with --preset: write paperscale.json, paperscale.md and paperscale.png here")
	f.StringVar(&o.Precision, "precision", "fp32", "frozen weights' products: fp32 (exact) or bf16")
	f.BoolVar(&o.EvaluateAlone, "evaluate-alone", false, "evaluate every client on its own (the baseline of evaluating a method's clients together)")
}

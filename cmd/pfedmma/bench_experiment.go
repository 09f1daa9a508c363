package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/bench"
)

// benchExperimentFlags are the flags of `bench experiment`.
type benchExperimentFlags struct {
	o          bench.ExperimentOptions
	ps         bench.PaperScaleOptions
	asJSON     bool
	ref        string
	out, dtype string
	merge      []string
	reproject  bool
}

func init() {
	var x benchExperimentFlags
	cmd := &cobra.Command{
		Use:   "experiment [--rounds N] [--clients N] [--shots N] [--reference FILE.json] [--json] | --preset NAME[:DATASET]... [--rounds-measured N] [--scale F] [--memory-budget MiB] [--out DIR]",
		Short: "A whole base-to-novel experiment at ViT-B/16 shapes: seconds per round by phase, FLOPs, projection",
		Long:  bench.ExperimentHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if x.o.Precision != "fp32" && x.o.Precision != "bf16" {
				return fmt.Errorf("bench experiment: --precision %q: want fp32 or bf16", x.o.Precision)
			}
			switch {
			case len(x.merge) > 0:
				return x.mergePaperScale(cmd)
			case len(x.ps.Presets) > 0:
				return x.paperScale(cmd)
			}
			return x.experiment(cmd)
		},
	}
	x.add(cmd)
	benchCmd.AddCommand(cmd)
}

// add defines the flags on cmd.
func (x *benchExperimentFlags) add(cmd *cobra.Command) {
	f, o, ps := cmd.Flags(), &x.o, &x.ps
	f.IntVar(&o.Rounds, "rounds", 2, "rounds (≥ 2; the first also fills the cache)")
	f.IntVar(&o.Clients, "clients", 10, "clients")
	f.IntVar(&o.Shots, "shots", 16, "training images per class")
	f.IntVar(&o.Classes, "classes", 40, "classes of the generated dataset (half base, half novel)")
	f.IntVar(&o.TestPerClass, "test-per-class", 10, "test images per class")
	f.StringVar(&x.ref, "reference", "", "the authors' figures (JSON: train_images_per_s, eval_images_per_s, peak_rss_mib)")
	f.BoolVar(&x.asJSON, "json", false, "print JSON")
	f.StringArrayVar(&ps.Presets, "preset", nil, "project this paper preset (NAME or NAME:DATASET, e.g. paper-cifar:cifar100; repeatable) from measured rounds: see Paper-scale runs in the README")
	f.IntVar(&ps.RoundsMeasured, "rounds-measured", 2, "with --preset: measured rounds (≥ 2; the first fills the cache)")
	f.Float64Var(&ps.Scale, "scale", 0.25, "with --preset: fraction of the shots and test images per class the measured run generates (classes, model, method stay the preset's)")
	f.IntVar(&ps.ClientsMeasured, "clients-measured", 2, "with --preset: clients of the measured run (0: the preset's, at most 10; at least what the method needs, e.g. pfedmoap.num_experts)")
	f.IntVar(&ps.MemoryBudgetMiB, "memory-budget", 8192, "with --preset: RAM budget of the prefix cache in MiB (cache.memory_mib); beyond it records spill to a memory-mapped file")
	f.StringVar(&x.dtype, "cache-dtype", "bfloat16", "with --preset: storage of the cached prefixes, bfloat16 or float32 (cache.dtype)")
	f.BoolVar(&ps.SpillCompare, "spill-compare", true, "with --preset: measure the rounds again with every cached record spilled (the spill's cost)")
	f.StringArrayVar(&x.merge, "merge", nil, "instead of measuring: join the presets of earlier --preset runs' paperscale.json files (repeatable) into one table and plot")
	f.BoolVar(&x.reproject, "reproject", false, "with --merge: project the saved measurements again under --memory-budget and --cache-dtype")
	f.StringVar(&x.out, "out", "", "with --preset: write paperscale.json, paperscale.md and paperscale.png here")
	f.StringVar(&o.Precision, "precision", "fp32", "frozen weights' products: fp32 (exact) or bf16")
	f.BoolVar(&o.EvaluateAlone, "evaluate-alone", false, "evaluate every client on its own (the baseline of evaluating a method's clients together)")
}

// experiment runs `bench experiment` without --preset or --merge: a few
// measured rounds of the base-to-novel recipe.
func (x *benchExperimentFlags) experiment(cmd *cobra.Command) error {
	if x.ref != "" {
		r, err := bench.LoadReference(x.ref)
		if err != nil {
			return err
		}
		x.o.Reference = r
	}
	x.o.Log = benchLog("bench experiment")
	r, err := bench.Experiment(cmd.Context(), x.o)
	if err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	if x.asJSON {
		return writeJSON(cmd.OutOrStdout(), r)
	}
	return r.WriteText(cmd.OutOrStdout())
}

// mergePaperScale runs `bench experiment --merge`: the saved projections
// joined, with --reproject projected again.
func (x *benchExperimentFlags) mergePaperScale(cmd *cobra.Command) error {
	r, err := bench.MergePaperScale(x.merge, !x.reproject)
	if err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	if x.reproject {
		if x.ps.CacheBF16, err = bench.ParseCacheDType(x.dtype); err != nil {
			return fmt.Errorf("bench experiment: %w", err)
		}
		x.ps.Log = benchLog("bench experiment")
		if err := bench.Reproject(r, x.ps); err != nil {
			return fmt.Errorf("bench experiment: --reproject: %w", err)
		}
	}
	return x.writePaperScale(cmd, r)
}

// paperScale runs `bench experiment --preset`: the measured rounds, the
// projection table (or JSON) and, with --out, the JSON, table and plot.
func (x *benchExperimentFlags) paperScale(cmd *cobra.Command) error {
	var err error
	if x.ps.CacheBF16, err = bench.ParseCacheDType(x.dtype); err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	x.ps.Log = benchLog("bench experiment")
	r, err := bench.PaperScale(cmd.Context(), x.ps)
	if err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	return x.writePaperScale(cmd, r)
}

// writePaperScale writes r's files into --out (when set) and prints its
// table or JSON.
func (x *benchExperimentFlags) writePaperScale(cmd *cobra.Command, r *bench.PaperScaleResult) error {
	if x.out != "" {
		if err := r.WriteFiles(x.out); err != nil {
			return fmt.Errorf("bench experiment: %w", err)
		}
	}
	if x.asJSON {
		return writeJSON(cmd.OutOrStdout(), r)
	}
	return r.WriteTable(cmd.OutOrStdout())
}

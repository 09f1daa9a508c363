package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/bench"
	"github.com/pfedmma/pfedmma/gemm"
)

var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Benchmark the engine (bench engine) and the training loop (bench train) at ViT-B/16 shapes",
}

func init() {
	benchCmd.AddCommand(newBenchEngineCmd(), newBenchTrainCmd())
	rootCmd.AddCommand(benchCmd)
}

// benchLog prints a benchmark's progress lines on stderr.
func benchLog(what string) func(string) {
	return func(s string) { fmt.Fprintln(os.Stderr, what+":", s) }
}

// newBenchEngineCmd builds `bench engine`.
func newBenchEngineCmd() *cobra.Command {
	var asJSON bool
	var o bench.EngineOptions
	var precision string
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "GEMM GFLOP/s, one block forward/backward, full image-encoder forward (random ViT-B/16 weights)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Precision, err = gemm.ParsePrecision(precision); err != nil {
				return fmt.Errorf("bench engine: --precision: %w", err)
			}
			o.Log = benchLog("bench engine")
			r, err := bench.Engine(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench engine: %w", err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return r.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&o.Batch, "batch", 32, "batch size")
	cmd.Flags().IntVar(&o.Repeat, "repeat", bench.MinSteps, "timed repetitions (after one warm-up)")
	cmd.Flags().StringVar(&precision, "precision", "fp32", "frozen weights' products: fp32, bf16 or auto (bf16 where a start-up probe measures it faster here)")
	return cmd
}

// newBenchTrainCmd builds `bench train`.
func newBenchTrainCmd() *cobra.Command {
	var t bench.TrainCommand
	var split bool
	cmd := &cobra.Command{
		Use:   "train",
		Short: "pFedMMA training and evaluation images/s (ViT-B/16 shapes, random weights, blocks 10-12, r 32, 24 classes)",
		Long:  bench.TrainHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t.NoSplit, t.Log = !split, benchLog("bench train")
			return bench.RunTrain(cmd.Context(), t, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&t.JSON, "json", false, "print JSON")
	f.BoolVar(&t.Uncached, "uncached", false, "with --method: recompute the frozen records (image encoder up to the method's cache depth) at every step and evaluation, like for like with the authors' code")
	f.IntVar(&t.Batch, "batch", 32, "batch size")
	f.IntVar(&t.Steps, "steps", bench.MinSteps, "timed steps per measurement (after one warm-up step)")
	f.IntVar(&t.Classes, "classes", 24, "classes")
	f.IntVar(&t.Start, "start", 10, "first adapted block")
	f.IntVar(&t.Dim, "dim", 32, "adapter width r")
	f.BoolVar(&split, "cache-block-output", true, "cache block ℓ's frozen output and adapter input (pfedmma.cache_block_output); false caches the prefix before block ℓ")
	f.StringVar(&t.Vocab, "vocab", "", "with --method: CLIP's BPE vocabulary (bpe_simple_vocab_16e6.txt.gz), for a method that tokenises text itself (fedmvp's class descriptions)")
	f.StringVar(&t.Method, "method", "", "benchmark this registered method through its client and the training loop (default: the pFedMMA engine benchmark)")
	f.StringVar(&t.Precision, "precision", "fp32", "frozen weights' products: fp32, bf16 or auto (bf16 where a start-up probe measures it faster here)")
	f.StringVar(&t.Reference, "reference", "", "reference figures (JSON: train_images_per_s, eval_images_per_s, peak_rss_mib) to compute speedups against")
	return cmd
}

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

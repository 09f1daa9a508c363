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

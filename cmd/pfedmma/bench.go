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

// benchTrainFlags are the flags of `bench train`.
type benchTrainFlags struct {
	asJSON, uncached, split             bool
	batch, steps, classes, start, dim   int
	vocab, precision, reference, method string
}

// newBenchTrainCmd builds `bench train`.
func newBenchTrainCmd() *cobra.Command {
	var t benchTrainFlags
	cmd := &cobra.Command{
		Use:   "train",
		Short: "pFedMMA training and evaluation images/s (ViT-B/16 shapes, random weights, blocks 10-12, r 32, 24 classes)",
		Long:  bench.TrainHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchTrain(cmd, t)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&t.asJSON, "json", false, "print JSON")
	f.BoolVar(&t.uncached, "uncached", false, "with --method: recompute the frozen records (image encoder up to the method's cache depth) at every step and evaluation, like for like with the authors' code")
	f.IntVar(&t.batch, "batch", 32, "batch size")
	f.IntVar(&t.steps, "steps", bench.MinSteps, "timed steps per measurement (after one warm-up step)")
	f.IntVar(&t.classes, "classes", 24, "classes")
	f.IntVar(&t.start, "start", 10, "first adapted block")
	f.IntVar(&t.dim, "dim", 32, "adapter width r")
	f.BoolVar(&t.split, "cache-block-output", true, "cache block ℓ's frozen output and adapter input (pfedmma.cache_block_output); false caches the prefix before block ℓ")
	f.StringVar(&t.vocab, "vocab", "", "with --method: CLIP's BPE vocabulary (bpe_simple_vocab_16e6.txt.gz), for a method that tokenises text itself (fedmvp's class descriptions)")
	f.StringVar(&t.method, "method", "", "benchmark this registered method through its client and the training loop (default: the pFedMMA engine benchmark)")
	f.StringVar(&t.precision, "precision", "fp32", "frozen weights' products: fp32, bf16 or auto (bf16 where a start-up probe measures it faster here)")
	f.StringVar(&t.reference, "reference", "", "reference figures (JSON: train_images_per_s, eval_images_per_s, peak_rss_mib) to compute speedups against")
	return cmd
}

// runBenchTrain runs `bench train`: the pFedMMA engine benchmark, or with
// --method a registered method's.
func runBenchTrain(cmd *cobra.Command, t benchTrainFlags) error {
	if err := bench.CheckTrainSizes(t.batch, t.steps, t.classes, t.start, t.dim); err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	prec, err := gemm.ParsePrecision(t.precision)
	if err != nil {
		return fmt.Errorf("bench train: --precision: %w", err)
	}
	var ref *bench.Reference
	if t.reference != "" {
		if ref, err = bench.LoadReference(t.reference); err != nil {
			return fmt.Errorf("bench train: --reference: %w", err)
		}
	}
	logf, w := benchLog("bench train"), cmd.OutOrStdout()
	if t.method != "" {
		r, err := bench.Method(cmd.Context(), bench.MethodOptions{Method: t.method, Batch: t.batch, Classes: t.classes, Steps: t.steps,
			Precision: prec, Reference: ref, Log: logf, Uncached: t.uncached, Vocab: t.vocab})
		if err != nil {
			return fmt.Errorf("bench train --method %s: %w", t.method, err)
		}
		if t.asJSON {
			return writeJSON(w, r)
		}
		return r.WriteText(w, ref)
	}
	r, err := bench.Train(cmd.Context(), bench.TrainOptions{Batch: t.batch, Steps: t.steps, Classes: t.classes, Start: t.start, Dim: t.dim,
		Precision: prec, Reference: ref, Log: logf, NoSplit: !t.split})
	if err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	if t.asJSON {
		return writeJSON(w, r)
	}
	return r.WriteText(w, ref)
}

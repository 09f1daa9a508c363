package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/bench"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/gemm"
)

var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Benchmark the engine (bench engine) and the training loop (bench train) at ViT-B/16 shapes",
}

// kernelLine names the GEMM library, the kernel family in use (and the
// better one when the CPU supports it) and the precision of the frozen
// weights' products.
func kernelLine(backend, core, best string, threads int, precision, bf16 string) string {
	k := core
	if best != "" && best != core {
		k += ", CPU supports " + best
	}
	line := fmt.Sprintf("%s (%s kernels, %d threads)", backend, k, threads)
	if precision == "bf16" {
		line += ", frozen weights in bf16 (" + bf16 + ")"
	}
	return line
}

func init() {
	var asJSON bool
	var batch, repeat int
	var precision string
	engine := &cobra.Command{
		Use:   "engine",
		Short: "GEMM GFLOP/s, one block forward/backward, full image-encoder forward (random ViT-B/16 weights)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			prec, err := gemm.ParsePrecision(precision)
			if err != nil {
				return fmt.Errorf("bench engine: --precision: %w", err)
			}
			logf := func(s string) { fmt.Fprintln(os.Stderr, "bench engine:", s) }
			r, err := bench.Engine(cmd.Context(), bench.EngineOptions{Batch: batch, Repeat: repeat, Precision: prec, Log: logf})
			if err != nil {
				return fmt.Errorf("bench engine: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "CPU\t%s\n", r.CPU)
			fmt.Fprintf(tw, "GEMM library\t%s\n", kernelLine(r.Backend, r.Core, r.BestCore, r.Threads, r.Precision, r.BF16Backend))
			fmt.Fprintf(tw, "timing\tmedian of %d after warm-up, ± interquartile range / median\n", r.Repeat)
			fmt.Fprintf(tw, "GEMM [%d·197×768]·[768×3072]\t%.1f GFLOP/s fp32 (best of %d)\n", r.Batch, r.GemmGFLOPS, max(r.Repeat, 3))
			if r.GemmBF16GFLOPS > 0 {
				fmt.Fprintf(tw, "\t%.1f GFLOP/s bf16\n", r.GemmBF16GFLOPS)
			}
			fmt.Fprintf(tw, "block forward\t%.1f ms ±%.0f%% (%.1f GFLOP/s overall, %.0f%% of GEMM peak)\n", r.BlockForwardMs, 100*r.BlockForwardSpread, r.BlockForwardGFLOPS, 100*r.BlockGemmShareOfPeak)
			fmt.Fprintf(tw, "GEMM inside the block\t%.1f GFLOP/s (%.0f%% of GEMM peak)\n", r.BlockLinearGFLOPS, 100*r.BlockLinearShareOfPeak)
			fmt.Fprintf(tw, "block backward (input grads)\t%.1f ms ±%.0f%% (%.2f× forward)\n", r.BlockBackwardMs, 100*r.BlockBackwardSpread, r.BlockBackwardRatio)
			fmt.Fprintf(tw, "image encoder forward\t%.2f images/s ±%.0f%% (%.2f s per batch of %d)\n", r.ImageForwardImagesPerS, 100*r.ImageForwardSpread, r.ImageForwardSecPerBatch, r.Batch)
			fmt.Fprintf(tw, "GEMM inside the encoder\t%.1f GFLOP/s, %.0f%% of its time\n", r.ImageForwardGemmGFLOPS, 100*r.ImageForwardGemmShare)
			return tw.Flush()
		},
	}
	engine.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	engine.Flags().IntVar(&batch, "batch", 32, "batch size")
	engine.Flags().IntVar(&repeat, "repeat", bench.MinSteps, "timed repetitions (after one warm-up)")
	engine.Flags().StringVar(&precision, "precision", "fp32", "frozen weights' products: fp32, bf16 or auto (bf16 where a start-up probe measures it faster here)")
	benchCmd.AddCommand(engine)

	var tJSON, tUncached bool
	var tBatch, tSteps, tClasses, tStart, tDim int
	var tSplit bool
	var tVocab string
	var tPrecision, tReference, tMethod string
	train := &cobra.Command{
		Use:   "train",
		Short: "pFedMMA training and evaluation images/s (ViT-B/16 shapes, random weights, blocks 10-12, r 32, 24 classes)",
		Long: `pFedMMA training and evaluation images/s at ViT-B/16 shapes with random weights.

Each figure is the median of --steps timed steps after one warm-up step, with
the interquartile range over the median as its spread. Speedups are printed
only against a reference: --reference FILE.json reads the JSON a reference
harness prints for the same settings on the same machine, for example
{"train_images_per_s": …, "eval_images_per_s": …, "peak_rss_mib": …}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkBenchTrainFlags(tBatch, tSteps, tClasses, tStart, tDim); err != nil {
				return fmt.Errorf("bench train: %w", err)
			}
			prec, err := gemm.ParsePrecision(tPrecision)
			if err != nil {
				return fmt.Errorf("bench train: --precision: %w", err)
			}
			var ref *bench.Reference
			if tReference != "" {
				if ref, err = bench.LoadReference(tReference); err != nil {
					return fmt.Errorf("bench train: --reference: %w", err)
				}
			}
			logf := func(s string) { fmt.Fprintln(os.Stderr, "bench train:", s) }
			if tMethod != "" {
				return benchMethod(cmd, bench.MethodOptions{Method: tMethod, Batch: tBatch, Classes: tClasses, Steps: tSteps,
					Precision: prec, Reference: ref, Log: logf, Uncached: tUncached, Vocab: tVocab}, tJSON)
			}
			r, err := bench.Train(cmd.Context(), bench.TrainOptions{Batch: tBatch, Steps: tSteps, Classes: tClasses, Start: tStart, Dim: tDim,
				Precision: prec, Reference: ref, Log: logf, NoSplit: !tSplit})
			if err != nil {
				return fmt.Errorf("bench train: %w", err)
			}
			if tJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return writeTrainText(cmd.OutOrStdout(), r, ref)
		},
	}
	train.Flags().BoolVar(&tJSON, "json", false, "print JSON")
	train.Flags().BoolVar(&tUncached, "uncached", false, "with --method: recompute the frozen records (image encoder up to the method's cache depth) at every step and evaluation, like for like with the authors' code")
	train.Flags().IntVar(&tBatch, "batch", 32, "batch size")
	train.Flags().IntVar(&tSteps, "steps", bench.MinSteps, "timed steps per measurement (after one warm-up step)")
	train.Flags().IntVar(&tClasses, "classes", 24, "classes")
	train.Flags().IntVar(&tStart, "start", 10, "first adapted block")
	train.Flags().IntVar(&tDim, "dim", 32, "adapter width r")
	train.Flags().BoolVar(&tSplit, "cache-block-output", true, "cache block ℓ's frozen output and adapter input (pfedmma.cache_block_output); false caches the prefix before block ℓ")
	train.Flags().StringVar(&tVocab, "vocab", "", "with --method: CLIP's BPE vocabulary (bpe_simple_vocab_16e6.txt.gz), for a method that tokenises text itself (fedmvp's class descriptions)")
	train.Flags().StringVar(&tMethod, "method", "", "benchmark this registered method through its client and the training loop (default: the pFedMMA engine benchmark)")
	train.Flags().StringVar(&tPrecision, "precision", "fp32", "frozen weights' products: fp32, bf16 or auto (bf16 where a start-up probe measures it faster here)")
	train.Flags().StringVar(&tReference, "reference", "", "reference figures (JSON: train_images_per_s, eval_images_per_s, peak_rss_mib) to compute speedups against")
	benchCmd.AddCommand(train)
	rootCmd.AddCommand(benchCmd)
}

// checkBenchTrainFlags refuses a size flag of `bench train` out of its
// range (the library would take 0 for its default and run on), naming the
// flag: ViT-B/16 has 12 blocks, and batch and classes are bounded as in a
// run's configuration.
func checkBenchTrainFlags(batch, steps, classes, start, dim int) error {
	for _, f := range []struct {
		name      string
		v, lo, hi int
	}{
		{"--batch", batch, 1, config.MaxBatchSize},
		{"--steps", steps, 1, 100000},
		{"--classes", classes, 1, config.MaxNumClasses},
		{"--start", start, 1, 12},
		{"--dim", dim, 1, 768},
	} {
		if f.v < f.lo || f.v > f.hi {
			return fmt.Errorf("%s %d: want %d to %d", f.name, f.v, f.lo, f.hi)
		}
	}
	return nil
}

// benchMethod prints bench.Method's result.
func benchMethod(cmd *cobra.Command, o bench.MethodOptions, asJSON bool) error {
	r, err := bench.Method(cmd.Context(), o)
	if err != nil {
		return fmt.Errorf("bench train --method %s: %w", o.Method, err)
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPU\t%s\n", r.CPU)
	fmt.Fprintf(tw, "GEMM library\t%s (%s, %d threads), %s\n", r.Backend, r.Core, r.Threads, r.Precision)
	fmt.Fprintf(tw, "setting\t%s: batch %d, %d classes, cached %s\n", r.Method, r.Batch, r.Classes, r.Depth)
	if r.Recomputed != "" {
		fmt.Fprintf(tw, "recomputed every step\t%s\n", r.Recomputed)
	}
	line := func(name string, rate, spread, speedup, ref float64) {
		if ref > 0 {
			fmt.Fprintf(tw, "%s\t%.2f images/s ±%.0f%%\t%.1f× (%s)\n", name, rate, 100*spread, speedup, o.Reference.Label(ref))
		} else {
			fmt.Fprintf(tw, "%s\t%.2f images/s ±%.0f%%\n", name, rate, 100*spread)
		}
	}
	line("train", r.TrainPerS, r.TrainSpread, r.SpeedupTrain, r.ReferenceTrn)
	line("eval", r.EvalPerS, r.EvalSpread, r.SpeedupEval, r.ReferenceEval)
	return tw.Flush()
}

// writeTrainText prints bench.Train's result r as a table (speedups
// against ref when set).
func writeTrainText(w io.Writer, r *bench.TrainResult, ref *bench.Reference) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPU\t%s\n", r.CPU)
	fmt.Fprintf(tw, "GEMM library\t%s\n", kernelLine(r.Backend, r.Core, r.BestCore, r.Threads, r.Precision, gemm.BF16Backend()))
	if r.Probe != nil {
		fmt.Fprintf(tw, "precision auto\t%s\n", r.Probe)
	}
	cached := "the prefix before the first adapted block"
	if r.Split {
		cached = "the first adapted block's frozen output and adapter input"
	}
	fmt.Fprintf(tw, "setting\tbatch %d, %d classes, adapters on blocks %s, r %d; cached: %s\n", r.Batch, r.Classes, r.Blocks, r.Dim, cached)
	fmt.Fprintf(tw, "GEMM in a cached training step\t%.1f GFLOP/s\n", r.GemmGFLOPS)
	if ref == nil {
		fmt.Fprintf(tw, "\timages/s (median of %d ± IQR/median)\n", r.Steps)
	} else {
		fmt.Fprintf(tw, "\timages/s (median of %d ± IQR/median)\tvs reference (its images/s; its configuration)\n", r.Steps)
	}
	for i, row := range r.Rows() {
		if i > 0 && !row.LikeForLike && r.Rows()[i-1].LikeForLike {
			cells := "\t\n" // as many cells as the rows, so the columns stay aligned
			if ref != nil {
				cells = "\t\t\n"
			}
			fmt.Fprint(tw, "cached (what pfedmma adds)"+cells)
		}
		if ref == nil {
			fmt.Fprintf(tw, "%s\t%.2f ±%.0f%%\n", row.Name, row.Rate, 100*row.Spread)
		} else {
			fmt.Fprintf(tw, "%s\t%.2f ±%.0f%%\t%.1f× (%s)\n", row.Name, row.Rate, 100*row.Spread, row.Speedup, ref.Label(row.Reference))
		}
	}
	if ref != nil && ref.PeakRSSMiB > 0 {
		fmt.Fprintf(tw, "peak RSS\t%.0f MiB\t(ref %.0f MiB)\n", r.PeakRSSMiB, ref.PeakRSSMiB)
	} else {
		fmt.Fprintf(tw, "peak RSS\t%.0f MiB\n", r.PeakRSSMiB)
	}
	return tw.Flush()
}

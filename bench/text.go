package bench

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/gemm"
)

// The tables `pfedmma bench` prints for each result, and the help and flag
// checks of its subcommands.

// TrainHelp is the long help of `pfedmma bench train`.
const TrainHelp = `pFedMMA training and evaluation images/s at ViT-B/16 shapes with random weights.

Each figure is the median of --steps timed steps after one warm-up step, with
the interquartile range over the median as its spread. Speedups are printed
only against a reference: --reference FILE.json reads the JSON a reference
harness prints for the same settings on the same machine, for example
{"train_images_per_s": …, "eval_images_per_s": …, "peak_rss_mib": …}.`

// ExperimentHelp is the long help of `pfedmma bench experiment`.
const ExperimentHelp = `Runs the pFedMMA paper's base-to-novel recipe (10 clients, adapters in blocks 10-12, r 32,
16 shots, 2 local epochs, evaluation every round) for a few rounds at ViT-B/16 shapes (random
weights) on a generated CoOp DTD-layout folder, and reports the cache fill, the seconds per
round split into training, aggregation and evaluation (median over the rounds after the
first), the GEMM FLOPs per round and the projection for 50 rounds. With --reference (the
JSON a reference harness prints: train_images_per_s, eval_images_per_s, peak_rss_mib) it
divides the authors' per-round cost - every client's 2 epochs of training plus one
evaluation of its test sets, at their measured images/s - by ours: speedup_per_round.

With --preset (repeatable; e.g. --preset paper-base2novel --preset paper-cifar:cifar100) it
projects each paper preset whole - every seed, every round, evaluation as its eval_every says,
the first round's cache fill, round 0 training every client - from --rounds-measured rounds of
the preset's trained method at ViT-B/16 shapes (random weights) on generated images with the
dataset's real class count (--scale shrinks the shots and test images per class of the
measured run; the datasets themselves are not downloaded). The projection builds the preset's
task on the dataset's real counts, multiplies by the measured seconds per training image,
evaluation image and cached record, and sizes the prefix cache under --memory-budget (bf16 by
default; records beyond it spill to a memory-mapped file, whose cost --spill-compare measures
by running the rounds again with every record spilled). It prints a table; --out DIR writes
paperscale.json, paperscale.md and paperscale.png (projected hours against clients, shots and
rounds).`

// KernelLine names the GEMM library, the kernel family in use (and the
// better one when the CPU supports it) and the precision of the frozen
// weights' products.
func KernelLine(backend, core, best string, threads int, precision, bf16 string) string {
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

// CheckTrainSizes refuses a size flag of `bench train` out of its range
// (Train would take 0 for its default and run on), naming the flag:
// ViT-B/16 has 12 blocks, and batch and classes are bounded as in a run's
// configuration.
func CheckTrainSizes(batch, steps, classes, start, dim int) error {
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

// ParseCacheDType reads --cache-dtype: true for bfloat16 (or bf16), false
// for float32.
func ParseCacheDType(dtype string) (bf16 bool, err error) {
	switch dtype {
	case "bfloat16", "bf16":
		return true, nil
	case "float32":
		return false, nil
	}
	return false, fmt.Errorf("--cache-dtype %q: want bfloat16 or float32", dtype)
}

// WriteText prints the engine benchmark as a table.
func (r *EngineResult) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPU\t%s\n", r.CPU)
	fmt.Fprintf(tw, "GEMM library\t%s\n", KernelLine(r.Backend, r.Core, r.BestCore, r.Threads, r.Precision, r.BF16Backend))
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
}

// WriteText prints a method's benchmark as a table (speedups against ref
// when set).
func (r *MethodResult) WriteText(w io.Writer, ref *Reference) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPU\t%s\n", r.CPU)
	fmt.Fprintf(tw, "GEMM library\t%s (%s, %d threads), %s\n", r.Backend, r.Core, r.Threads, r.Precision)
	fmt.Fprintf(tw, "setting\t%s: batch %d, %d classes, cached %s\n", r.Method, r.Batch, r.Classes, r.Depth)
	if r.Recomputed != "" {
		fmt.Fprintf(tw, "recomputed every step\t%s\n", r.Recomputed)
	}
	line := func(name string, rate, spread, speedup, refRate float64) {
		if refRate > 0 {
			fmt.Fprintf(tw, "%s\t%.2f images/s ±%.0f%%\t%.1f× (%s)\n", name, rate, 100*spread, speedup, ref.Label(refRate))
		} else {
			fmt.Fprintf(tw, "%s\t%.2f images/s ±%.0f%%\n", name, rate, 100*spread)
		}
	}
	line("train", r.TrainPerS, r.TrainSpread, r.SpeedupTrain, r.ReferenceTrn)
	line("eval", r.EvalPerS, r.EvalSpread, r.SpeedupEval, r.ReferenceEval)
	return tw.Flush()
}

// WriteText prints the training benchmark as a table (speedups against
// ref when set).
func (r *TrainResult) WriteText(w io.Writer, ref *Reference) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPU\t%s\n", r.CPU)
	fmt.Fprintf(tw, "GEMM library\t%s\n", KernelLine(r.Backend, r.Core, r.BestCore, r.Threads, r.Precision, gemm.BF16Backend()))
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
	r.writeRows(tw, ref)
	if ref != nil && ref.PeakRSSMiB > 0 {
		fmt.Fprintf(tw, "peak RSS\t%.0f MiB\t(ref %.0f MiB)\n", r.PeakRSSMiB, ref.PeakRSSMiB)
	} else {
		fmt.Fprintf(tw, "peak RSS\t%.0f MiB\n", r.PeakRSSMiB)
	}
	return tw.Flush()
}

// writeRows prints the table's rows: the like-for-like ones, then under a
// heading those only pfedmma's cache makes.
func (r *TrainResult) writeRows(tw io.Writer, ref *Reference) {
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
}

// WriteText prints the experiment benchmark as a table.
func (r *ExperimentResult) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPU\t%s\n", r.CPU)
	fmt.Fprintf(tw, "GEMM backend\t%s (%s, %d threads), precision %s\n", r.Backend, r.Kernel, r.Threads, r.Precision)
	if r.EvaluatedAlone {
		fmt.Fprintf(tw, "evaluation\tevery client alone (--evaluate-alone)\n")
	}
	fmt.Fprintf(tw, "cache fill\t%.1f s\n", r.CacheFillSeconds)
	fmt.Fprintf(tw, "first round (with the cache fill)\t%.1f s\n", r.FirstRoundSeconds)
	fmt.Fprintf(tw, "seconds per round (median)\t%.2f s: training %.2f, aggregation %.4f, evaluation %.2f\n", r.SecondsPerRound, r.TrainSecondsPerRound, r.AggSecondsPerRound, r.EvalSecondsPerRound)
	fmt.Fprintf(tw, "GEMM work per round\t%.0f GFLOP (%.0f GFLOP/s)\n", r.GFLOPPerRound, r.GFLOPPerRound/r.SecondsPerRound)
	fmt.Fprintf(tw, "images the reference pushes per round\t%d training, %d evaluation\n", r.TrainImagesPerRound, r.EvalImagesPerRound)
	fmt.Fprintf(tw, "projected 50 rounds\t%.0f s\n", r.Projected50Seconds)
	if r.SpeedupPerRound > 0 {
		fmt.Fprintf(tw, "reference per round\t%.1f s (speed-up %.1f×)\n", r.ReferencePerRound, r.SpeedupPerRound)
		fmt.Fprintf(tw, "reference training per round\t%.1f s (speed-up %.1f×)\n", r.ReferenceTrainPerRound, r.SpeedupTrain)
		fmt.Fprintf(tw, "reference evaluation per round\t%.1f s (speed-up %.1f×)\n", r.ReferenceEvalPerRound, r.SpeedupEval)
	}
	return tw.Flush()
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/bench"
)

func init() {
	var o bench.ExperimentOptions
	var asJSON bool
	var ref string
	var ps bench.PaperScaleOptions
	var psOut, psDType string
	var psMerge []string
	var psReproject bool
	cmd := &cobra.Command{
		Use:   "experiment [--rounds N] [--clients N] [--shots N] [--reference FILE.json] [--json] | --preset NAME[:DATASET]... [--rounds-measured N] [--scale F] [--memory-budget MiB] [--out DIR]",
		Short: "A whole base-to-novel experiment at ViT-B/16 shapes: seconds per round by phase, FLOPs, projection",
		Long: `Runs the pFedMMA paper's base-to-novel recipe (10 clients, adapters in blocks 10-12, r 32,
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
rounds).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Precision != "fp32" && o.Precision != "bf16" {
				return fmt.Errorf("bench experiment: --precision %q: want fp32 or bf16", o.Precision)
			}
			if len(psMerge) > 0 {
				r, err := bench.MergePaperScale(psMerge, !psReproject)
				if err != nil {
					return fmt.Errorf("bench experiment: %w", err)
				}
				if psReproject {
					switch psDType {
					case "bfloat16", "bf16":
						ps.CacheBF16 = true
					case "float32":
					default:
						return fmt.Errorf("bench experiment: --cache-dtype %q: want bfloat16 or float32", psDType)
					}
					ps.Log = func(s string) { fmt.Fprintln(os.Stderr, "bench experiment:", s) }
					if err := bench.Reproject(r, ps); err != nil {
						return fmt.Errorf("bench experiment: --reproject: %w", err)
					}
				}
				return writePaperScale(cmd, r, psOut, asJSON)
			}
			if len(ps.Presets) > 0 {
				return paperScale(cmd, ps, psDType, psOut, asJSON)
			}
			if ref != "" {
				r, err := bench.LoadReference(ref)
				if err != nil {
					return err
				}
				o.Reference = r
			}
			o.Log = func(s string) { fmt.Fprintln(os.Stderr, "bench experiment:", s) }
			r, err := bench.Experiment(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench experiment: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
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
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Rounds, "rounds", 2, "rounds (≥ 2; the first also fills the cache)")
	f.IntVar(&o.Clients, "clients", 10, "clients")
	f.IntVar(&o.Shots, "shots", 16, "training images per class")
	f.IntVar(&o.Classes, "classes", 40, "classes of the generated dataset (half base, half novel)")
	f.IntVar(&o.TestPerClass, "test-per-class", 10, "test images per class")
	f.StringVar(&ref, "reference", "", "the authors' figures (JSON: train_images_per_s, eval_images_per_s, peak_rss_mib)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringArrayVar(&ps.Presets, "preset", nil, "project this paper preset (NAME or NAME:DATASET, e.g. paper-cifar:cifar100; repeatable) from measured rounds: see Paper-scale runs in the README")
	f.IntVar(&ps.RoundsMeasured, "rounds-measured", 2, "with --preset: measured rounds (≥ 2; the first fills the cache)")
	f.Float64Var(&ps.Scale, "scale", 0.25, "with --preset: fraction of the shots and test images per class the measured run generates (classes, model, method stay the preset's)")
	f.IntVar(&ps.ClientsMeasured, "clients-measured", 2, "with --preset: clients of the measured run (0: the preset's, at most 10; at least what the method needs, e.g. pfedmoap.num_experts)")
	f.IntVar(&ps.MemoryBudgetMiB, "memory-budget", 8192, "with --preset: RAM budget of the prefix cache in MiB (cache.memory_mib); beyond it records spill to a memory-mapped file")
	f.StringVar(&psDType, "cache-dtype", "bfloat16", "with --preset: storage of the cached prefixes, bfloat16 or float32 (cache.dtype)")
	f.BoolVar(&ps.SpillCompare, "spill-compare", true, "with --preset: measure the rounds again with every cached record spilled (the spill's cost)")
	f.StringArrayVar(&psMerge, "merge", nil, "instead of measuring: join the presets of earlier --preset runs' paperscale.json files (repeatable) into one table and plot")
	f.BoolVar(&psReproject, "reproject", false, "with --merge: project the saved measurements again under --memory-budget and --cache-dtype")
	f.StringVar(&psOut, "out", "", "with --preset: write paperscale.json, paperscale.md and paperscale.png here")
	f.StringVar(&o.Precision, "precision", "fp32", "frozen weights' products: fp32 (exact) or bf16")
	f.BoolVar(&o.EvaluateAlone, "evaluate-alone", false, "evaluate every client on its own (the baseline of evaluating a method's clients together)")
	benchCmd.AddCommand(cmd)
}

// paperScale runs `bench experiment --preset`: the measured rounds, the
// projection table (or JSON) and, with --out, the JSON, table and plot.
func paperScale(cmd *cobra.Command, o bench.PaperScaleOptions, dtype, out string, asJSON bool) error {
	switch dtype {
	case "bfloat16", "bf16":
		o.CacheBF16 = true
	case "float32":
	default:
		return fmt.Errorf("bench experiment: --cache-dtype %q: want bfloat16 or float32", dtype)
	}
	o.Log = func(s string) { fmt.Fprintln(os.Stderr, "bench experiment:", s) }
	r, err := bench.PaperScale(cmd.Context(), o)
	if err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	return writePaperScale(cmd, r, out, asJSON)
}

// writePaperScale writes r's files into out (when set) and prints its
// table or JSON.
func writePaperScale(cmd *cobra.Command, r *bench.PaperScaleResult, out string, asJSON bool) error {
	if out != "" {
		if err := r.WriteFiles(out); err != nil {
			return fmt.Errorf("bench experiment: %w", err)
		}
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteTable(cmd.OutOrStdout())
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/bench"
)

var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Benchmark the engine (bench engine) and the training loop (bench train) at ViT-B/16 shapes",
}

func init() {
	var asJSON bool
	var batch, repeat int
	engine := &cobra.Command{
		Use:   "engine",
		Short: "GEMM GFLOP/s, one block forward/backward, full image-encoder forward (random ViT-B/16 weights)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			logf := func(s string) { fmt.Fprintln(os.Stderr, "bench engine:", s) }
			r, err := bench.Engine(cmd.Context(), bench.EngineOptions{Batch: batch, Repeat: repeat, Log: logf})
			if err != nil {
				return fmt.Errorf("bench engine: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "backend\t%s (%s, %d threads)\n", r.Backend, r.Core, r.Threads)
			fmt.Fprintf(tw, "GEMM [%d×197×768]·[768×3072]\t%.1f GFLOP/s\n", r.Batch, r.GemmGFLOPS)
			fmt.Fprintf(tw, "block forward\t%.1f ms (%.1f GFLOP/s overall, %.0f%% of GEMM peak)\n", r.BlockForwardMs, r.BlockForwardGFLOPS, 100*r.BlockGemmShareOfPeak)
			fmt.Fprintf(tw, "GEMM inside the block\t%.1f GFLOP/s (%.0f%% of GEMM peak)\n", r.BlockLinearGFLOPS, 100*r.BlockLinearShareOfPeak)
			fmt.Fprintf(tw, "block backward (input grads)\t%.1f ms (%.2f× forward)\n", r.BlockBackwardMs, r.BlockBackwardRatio)
			fmt.Fprintf(tw, "image encoder forward\t%.2f images/s (%.2f s per batch of %d)\n", r.ImageForwardImagesPerS, r.ImageForwardSecPerBatch, r.Batch)
			return tw.Flush()
		},
	}
	engine.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	engine.Flags().IntVar(&batch, "batch", 32, "batch size")
	engine.Flags().IntVar(&repeat, "repeat", 3, "timed repetitions")
	benchCmd.AddCommand(engine)

	var tJSON bool
	var tBatch, tSteps, tClasses, tStart, tDim int
	train := &cobra.Command{
		Use:   "train",
		Short: "pFedMMA training and evaluation images/s (ViT-B/16 shapes, random weights, blocks 10-12, r 32, 24 classes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			logf := func(s string) { fmt.Fprintln(os.Stderr, "bench train:", s) }
			r, err := bench.Train(cmd.Context(), bench.TrainOptions{Batch: tBatch, Steps: tSteps, Classes: tClasses, Start: tStart, Dim: tDim, Log: logf})
			if err != nil {
				return fmt.Errorf("bench train: %w", err)
			}
			if tJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "backend\t%s (%s, %d threads)\n", r.Backend, r.Core, r.Threads)
			fmt.Fprintf(tw, "setting\tbatch %d, %d classes, adapters on blocks %s, r %d\n", r.Batch, r.Classes, r.Blocks, r.Dim)
			fmt.Fprintf(tw, "\timages/s\tvs reference\n")
			fmt.Fprintf(tw, "train, cached prefixes\t%.2f\t%.1f× (ref %.2f)\n", r.TrainCachedPerS, r.SpeedupTrainCached, r.ReferenceTrainPerS)
			fmt.Fprintf(tw, "eval, cached prefixes\t%.2f\t%.1f× (ref %.2f)\n", r.EvalCachedPerS, r.SpeedupEvalCached, r.ReferenceEvalPerS)
			fmt.Fprintf(tw, "train, online augmentation\t%.2f\t%.1f×\n", r.TrainOnlinePerS, r.SpeedupTrainOnline)
			fmt.Fprintf(tw, "eval, online (no cache)\t%.2f\t%.1f×\n", r.EvalOnlinePerS, r.SpeedupEvalOnline)
			fmt.Fprintf(tw, "peak RSS\t%.0f MiB\t(ref 3277 MiB)\n", r.PeakRSSMiB)
			return tw.Flush()
		},
	}
	train.Flags().BoolVar(&tJSON, "json", false, "print JSON")
	train.Flags().IntVar(&tBatch, "batch", 32, "batch size")
	train.Flags().IntVar(&tSteps, "steps", 3, "timed steps per measurement")
	train.Flags().IntVar(&tClasses, "classes", 24, "classes")
	train.Flags().IntVar(&tStart, "start", 10, "first adapted block")
	train.Flags().IntVar(&tDim, "dim", 32, "adapter width r")
	benchCmd.AddCommand(train)
	rootCmd.AddCommand(benchCmd)
}

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
			fmt.Fprintf(tw, "block forward\t%.1f ms (%.1f GFLOP/s, %.0f%% of GEMM peak)\n", r.BlockForwardMs, r.BlockForwardGFLOPS, 100*r.BlockGemmShareOfPeak)
			fmt.Fprintf(tw, "block backward (input grads)\t%.1f ms (%.2f× forward)\n", r.BlockBackwardMs, r.BlockBackwardRatio)
			fmt.Fprintf(tw, "image encoder forward\t%.2f images/s (%.2f s per batch of %d)\n", r.ImageForwardImagesPerS, r.ImageForwardSecPerBatch, r.Batch)
			return tw.Flush()
		},
	}
	engine.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	engine.Flags().IntVar(&batch, "batch", 32, "batch size")
	engine.Flags().IntVar(&repeat, "repeat", 3, "timed repetitions")
	benchCmd.AddCommand(engine)
	rootCmd.AddCommand(benchCmd)
}

package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/preprocess"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Versions of the binary and of the libraries that compute (GEMM, bfloat16, JPEG)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						v = s.Value
					}
				}
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "pfedmma\t%s (%s, %s/%s)\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			fmt.Fprintf(tw, "CPU\t%s\n", gemm.CPU())
			fmt.Fprintf(tw, "float32 GEMM\t%s, %s kernels, %d threads\n", gemm.Backend(), gemm.CoreName(), gemm.Threads())
			fmt.Fprintf(tw, "bfloat16 GEMM\t%s\n", gemm.BF16Backend())
			// both rates at ViT-B/16's shapes (a batch of 2 images), the
			// figures engine.precision auto compares
			probe := gemm.ProbePrecision(vitB16Shapes, 400*time.Millisecond)
			fmt.Fprintf(tw, "GEMM rates (ViT-B/16 shapes)\t%s\n", probe)
			fmt.Fprintf(tw, "JPEG decoder\t%s\n", preprocess.JPEGDecoder())
			return tw.Flush()
		},
	})
}

// vitB16Shapes are a ViT-B/16 block's four weight products for 2 images
// (197 tokens each, width 768, MLP 3072).
var vitB16Shapes = []gemm.Shape{{M: 2 * 197, N: 2304, K: 768}, {M: 2 * 197, N: 768, K: 768}, {M: 2 * 197, N: 3072, K: 768}, {M: 2 * 197, N: 768, K: 3072}}

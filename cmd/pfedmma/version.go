package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

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
			fmt.Fprintf(tw, "float32 GEMM\t%s, %s kernels, %d threads\n", gemm.Backend(), gemm.CoreName(), gemm.Threads())
			fmt.Fprintf(tw, "bfloat16 GEMM\t%s\n", gemm.BF16Backend())
			fmt.Fprintf(tw, "JPEG decoder\t%s\n", preprocess.JPEGDecoder())
			return tw.Flush()
		},
	})
}

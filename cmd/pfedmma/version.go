package main

import (
	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/internal/versions"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Versions of the binary and of the libraries that compute (GEMM, bfloat16, JPEG)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return versions.Write(cmd.OutOrStdout()) },
	})
}

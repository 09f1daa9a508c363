package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/redraw"
)

func init() {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN_DIR [RUN_DIR...] [--out DIR]",
		Short: "Re-draw a finished run's tables and figures; with several runs (datasets), their comparison",
		Long:  redraw.Help,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := redraw.Redraw(args, out, cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "folder for the comparison of several runs")
	rootCmd.AddCommand(cmd)
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
)

func init() {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN_DIR [RUN_DIR...] [--out DIR]",
		Short: "Re-draw a finished run's tables and figures; with several runs (datasets), their comparison",
		Long: `Re-draw the figures (curves.png/svg: one panel per metric; final.png/svg: the
final bars) and report.md of each finished run folder from its metrics.jsonl and
summary.json. With several run folders (one per dataset, same methods) it also
writes into --out the table averaged over the datasets (summary.json, report.md)
and, for three datasets or more, a radar chart of the headline metric
(radar.png/svg: HM for base-to-novel, else accuracy), and the headline metric per
dataset and method (pFedMoAP's Table 1 layout). A leave-one-domain-out run over
every held-out domain (lodo.json) is re-drawn as its accuracy matrices, G/P/C and
generalisation tables; several of them (datasets) give FedOT's Table 1.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := experiment.Redraw(args, out, cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "folder for the comparison of several runs")
	rootCmd.AddCommand(cmd)
}

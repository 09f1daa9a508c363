package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
)

// hostSites runs `pfedmma site --clients SPEC`: one process serving
// several clients of the federation.
func hostSites(cmd *cobra.Command, c experiment.SiteConfig, spec string) error {
	if c.Experiment != nil && c.Experiment.Threads > 0 && !cmd.Flags().Changed("threads") {
		setThreads(c.Experiment.Threads)
	}
	res, err := experiment.HostSites(cmd.Context(), c, spec)
	if err != nil {
		return fmt.Errorf("site --clients %s: %w", spec, err)
	}
	for _, r := range res {
		fmt.Fprintf(cmd.OutOrStdout(), "site %s (client %d) done; its parameters and metrics are in %s\n", r.Name, r.ID, r.State)
	}
	return nil
}

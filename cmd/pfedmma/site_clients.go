package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
)

// hostSites runs `pfedmma site --clients SPEC`: one process serving
// several clients of the federation (--threads, the root's flag, sets the
// threads they take turns to use).
func hostSites(cmd *cobra.Command, c experiment.SiteConfig, spec string) error {
	res, err := experiment.HostSites(cmd.Context(), c, spec)
	if err != nil {
		return fmt.Errorf("site --clients %s: %w", spec, err)
	}
	for _, r := range res {
		experiment.WriteSiteDone(cmd.OutOrStdout(), r.Name, r.ID, r.State, r.Over, r.OverFile)
	}
	return nil
}

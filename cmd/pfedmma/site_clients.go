package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/transport"
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
		printSiteDone(cmd.OutOrStdout(), r.Name, r.ID, r.State, r.Over, r.OverFile)
	}
	return nil
}

// printSiteDone says that site name (client id) is done, its results in
// state; over, when set, is the record of a federation that had already
// finished, kept in overFile: the site did nothing.
func printSiteDone(w io.Writer, name string, id int, state string, over *transport.FederationOver, overFile string) {
	if over == nil {
		fmt.Fprintf(w, "site %s (client %d) done; its parameters and metrics are in %s\n", name, id, state)
		return
	}
	fmt.Fprintf(w, "site %s (client %d): the federation of the coordinator at %s is over (it finished at %s, as recorded in %s): nothing to do; its parameters and metrics are in %s (to join a new federation, give another --state or remove that file)\n",
		name, id, over.Server, over.At.Format(time.RFC3339), overFile, state)
}

package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/methods"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "methods",
		Short: "List the registered methods: what each trains and shares, and its paper",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "METHOD\tTRAINS\tSHARES\tPAPER")
			for _, m := range methods.All() {
				i := m.Info()
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", i.Name, i.Trains, i.Shares, i.Paper)
			}
			return tw.Flush()
		},
	})
}

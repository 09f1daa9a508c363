package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/methods"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "methods [NAME]",
		Short: "List the registered methods (one line each); with NAME, what it trains and shares, and its paper",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				m, err := methods.Get(args[0])
				if err != nil {
					return fmt.Errorf("methods: %w", err)
				}
				return m.Info().WriteDetails(cmd.OutOrStdout())
			}
			var infos []methods.Info
			for _, m := range methods.All() {
				infos = append(infos, m.Info())
			}
			return methods.WriteList(cmd.OutOrStdout(), infos)
		},
	})
}

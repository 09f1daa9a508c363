package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/parity"
)

func init() {
	for _, kind := range []string{"step", "round"} {
		c := parity.Command{Kind: kind, ResolveModel: resolveModelPath, LoadWeights: experiment.LoadWeights}
		cmd := &cobra.Command{
			Use:   kind + " --method NAME --model M --params INIT.safetensors --batch FILE.safetensors [--set key=value]... --out OUT.safetensors",
			Short: map[string]string{"step": "One training step of a method on given inputs (the reference fixtures' contract)", "round": "One federated round of a method on given inputs (the reference fixtures' contract)"}[kind],
			Long:  parity.CommandHelp,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				n, err := parity.Run(cmd.Context(), c)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %d tensors written to %s\n", kind, n, c.Out)
				}
				return err
			},
		}
		fl := cmd.Flags()
		fl.StringVar(&c.Method, "method", "", "method name (`pfedmma methods`)")
		fl.StringVar(&c.Model, "model", "", "CLIP checkpoint (default: the embedded tiny model)")
		fl.StringVar(&c.Params, "params", "", "initial parameters (safetensors, reference names)")
		fl.StringArrayVar(&c.Batches, "batch", nil, "inputs (safetensors; repeatable)")
		fl.StringArrayVar(&c.Sets, "set", nil, "hyper-parameter override key=value (repeatable)")
		fl.StringVar(&c.Out, "out", "", "output safetensors file")
		rootCmd.AddCommand(cmd)
	}
}

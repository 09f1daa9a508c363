package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/pretrain"
)

func init() {
	opts := pretrain.DefaultOptions()
	rootCmd.AddCommand(newPretrainCmd(&opts))
}

// newPretrainCmd builds `pfedmma pretrain`, whose flags set *opts; they are
// exactly opts.Flags, so pretrain.json's reproduce command parses back.
func newPretrainCmd(opts *pretrain.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pretrain [--out DIR] [flags] [--resume]",
		Short: "Pretrain a small CLIP from scratch on the generated world",
		Long:  pretrain.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := pretrain.Run(cmd.Context(), *opts, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			m := res.Metrics
			slog.Info("pretrain: done", "out", opts.OutDir, "params", res.Params, "bytes", res.ModelBytes,
				"wall", fmt.Sprintf("%.0fs", res.WallSeconds), "final_loss", fmt.Sprintf("%.3f", res.FinalLoss))
			fmt.Fprintf(cmd.OutOrStdout(), "zero-shot top-1: seen %.3f (%d-way) %.3f (%d-way); held-out %.3f (%d-way) %.3f (%d-way)\n",
				m.SeenAll.Top1, m.SeenAll.Classes, m.SeenOnly.Top1, m.SeenOnly.Classes,
				m.HeldOutAll.Top1, m.HeldOutAll.Classes, m.HeldOutOnly.Top1, m.HeldOutOnly.Classes)
			return nil
		},
	}
	addOptionFlags(cmd, opts)
	cmd.Flags().BoolVar(&opts.Resume, "resume", false, "continue from the state in --out")
	return cmd
}

// addOptionFlags defines one flag per pretrain.Options field.
func addOptionFlags(cmd *cobra.Command, o *pretrain.Options) {
	fs := cmd.Flags()
	for _, f := range o.Flags() {
		switch p := f.Ptr.(type) {
		case *int:
			fs.IntVar(p, f.Name, *p, f.Usage)
		case *uint64:
			fs.Uint64Var(p, f.Name, *p, f.Usage)
		case *float64:
			fs.Float64Var(p, f.Name, *p, f.Usage)
		case *string:
			fs.StringVar(p, f.Name, *p, f.Usage)
		case *bool:
			fs.BoolVar(p, f.Name, *p, f.Usage)
		}
	}
}

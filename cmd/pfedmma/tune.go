package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/tune"
)

func init() {
	o := tune.Options{ResolveModel: resolveModelPath, Progress: os.Stderr}
	var grid []string
	var seeds []uint
	cmd := &cobra.Command{
		Use:   "tune --preset P --method M --grid key=v1,v2,… [--grid …] [--trials N] [--seeds 1,2] --out DIR",
		Short: "Search a method's settings on the validation split (never the test images); resumable",
		Long:  tune.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if o.Grid, err = tune.ParseGrid(grid); err != nil {
				return err
			}
			o.Seeds = nil
			for _, s := range seeds {
				o.Seeds = append(o.Seeds, uint64(s))
			}
			res, err := tune.Run(cmd.Context(), o)
			if err == nil {
				fmt.Fprint(cmd.OutOrStdout(), res.Text())
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Preset, "preset", "", "base preset (default: the default job's)")
	f.StringVar(&o.ConfigFile, "config", "", "base experiment YAML")
	f.StringArrayVar(&o.Sets, "set", nil, "override a base field (repeatable)")
	f.StringVar(&o.Method, "method", "", "the method tuned (it runs alone)")
	f.StringArrayVar(&grid, "grid", nil, "key=v1,v2,… searched (repeatable; the product is the grid)")
	f.IntVar(&o.Trials, "trials", 0, "run this many grid points drawn at random (seeded by --sample-seed) instead of all")
	f.Uint64Var(&o.SampleSeed, "sample-seed", 1, "seed of the --trials draw")
	f.UintSliceVar(&seeds, "seeds", nil, "seeds each trial runs (score: their mean; default the configuration's)")
	f.StringVar(&o.Out, "out", "", "the tune's folder (required; the same folder continues a tune)")
	f.BoolFunc("quiet", "no progress bar", func(v string) error {
		o.ProgressMode = map[bool]progress.Mode{true: progress.Quiet, false: progress.Auto}[v == "true"]
		return nil
	})
	rootCmd.AddCommand(cmd)
}

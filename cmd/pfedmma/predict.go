package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
)

func init() {
	var c experiment.PredictConfig
	cmd := &cobra.Command{
		Use:   "predict --run DIR [--method NAME] [--client N] [--space NAME|all] [--top K] --image FILE [FILE...]",
		Short: "Classify images with one site's personalised model from a finished run",
		Long: `Classify images with the model one site (client) ended a finished run with.

The run folder's run.json names the model, the prompt template and the label
spaces; the site's trained tensors come from the run's per-site files
(sites/METHOD/, or adapters/ in a pFedMMA run from before that layout).
--method picks one of the run's methods (default: the first it trained;
pfedmma in the default run). --space picks the label space (default: the one
the site trained over; "all" means every class of the dataset). Images may
follow --image as further arguments.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c.Images = append(c.Images, args...)
			p, err := experiment.Predict(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			return p.WriteText(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Run, "run", "", "output folder (`DIR`) of a finished pfedmma run")
	f.StringVar(&c.Method, "method", "", "method whose site model to use (default: the run's first trained method)")
	f.IntVar(&c.Client, "client", 0, "client (site) ID, from 0 (see run.json)")
	f.StringArrayVar(&c.Images, "image", nil, "image file (repeatable; more files may follow as arguments)")
	f.StringVar(&c.Space, "space", "", "label space to classify over (default: the site's training space; e.g. base, novel, all)")
	f.IntVar(&c.Top, "top", 5, "classes to print per image (≥ 1)")
	rootCmd.AddCommand(cmd)
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/predict"
)

func init() {
	var c predict.PredictConfig
	cmd := &cobra.Command{
		Use:   "predict --run DIR [--method NAME] [--client N] [--space NAME|all] [--top K] [--model PATH] --image FILE [FILE...]",
		Short: "Classify images with one site's personalised model from a finished run",
		Long:  predict.PredictHelp,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := c
			c.Images = append(c.Images, args...)
			c.DefaultModel = defaultModelDir
			p, err := predict.Predict(cmd.Context(), c)
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
	f.StringVar(&c.Model, "model", "", "the run's model at another path (`PATH`: file or folder; checked against run.json's model_sha256)")
	rootCmd.AddCommand(cmd)
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
)

func init() {
	var c experiment.PredictConfig
	cmd := &cobra.Command{
		Use:   "predict --run DIR [--method NAME] [--client N] [--space NAME|all] [--top K] [--model PATH] --image FILE [FILE...]",
		Short: "Classify images with one site's personalised model from a finished run",
		Long: `Classify images with the model one site (client) ended a finished run with.

The run folder's run.json names the model, the prompt template and the label
spaces; the site's trained tensors come from the run's per-site files
(sites/METHOD/, or adapters/ in a pFedMMA run from before that layout).
--method picks one of the run's methods (default: the first it trained;
pfedmma in the default run). --space picks the label space (default: the one
the site trained over; "all" means every class of the dataset). Images may
follow --image as further arguments.

The run folder may move: run.json names its own files relative to it, and
identifies the model by its SHA-256 (model_sha256). A run on the embedded
model finds it on any machine; for another model not at run.json's path
there, give it with --model (it must be the same model: same SHA-256).
For a federation coordinated by pfedmma serve, each site keeps its file in
its own state folder: copy it into the run folder's sites/METHOD/ first.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := c
			c.Images = append(c.Images, args...)
			c.DefaultModel = defaultModelDir
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
	f.StringVar(&c.Model, "model", "", "the run's model at another path (`PATH`: file or folder; checked against run.json's model_sha256)")
	rootCmd.AddCommand(cmd)
}

package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/predict"
)

func init() {
	var c predict.ClassifyConfig
	var classes string
	cmd := &cobra.Command{
		Use:   `zeroshot --model PATH [--vocab FILE] --classes "a,b,c" [--template "a photo of a {}."] --image FILE...`,
		Short: "Classify images zero-shot against class names; prints each image's top-5 classes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := c
			c.Classes = strings.Split(classes, ",")
			var err error
			if c.Model, err = resolveModelPath(c.Model); err != nil {
				return fmt.Errorf("zeroshot: %w", err)
			}
			p, err := predict.Classify(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("zeroshot: %w", err)
			}
			return p.WriteText(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Model, "model", "", "CLIP checkpoint: .safetensors file or model folder (default: the embedded tiny model)")
	f.StringVar(&c.Vocab, "vocab", "", "BPE vocabulary (default: the one shipped with the model)")
	f.StringVar(&classes, "classes", "", "comma-separated class names")
	f.StringVar(&c.Template, "template", "a photo of a {}.", "prompt template; {} is replaced by the class name")
	f.StringArrayVar(&c.Images, "image", nil, "image file (repeatable)")
	f.IntVar(&c.Top, "top", 5, "classes to print per image (≥ 1)")
	rootCmd.AddCommand(cmd)
}

package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/predict"
)

func init() {
	var c predict.EmbedConfig
	cmd := &cobra.Command{
		Use:   "embed --model PATH [--vocab FILE] (--image FILE... | --pixels FILE.safetensors) [--text STRING...] [--normalize]",
		Short: "Print CLIP image and text features as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := c
			var err error
			if c.Model, err = resolveModelPath(c.Model); err != nil {
				return fmt.Errorf("embed: %w", err)
			}
			out, err := predict.Embed(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("embed: %w", err)
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Model, "model", "", "CLIP checkpoint: .safetensors file or model folder (default: the embedded tiny model)")
	f.StringVar(&c.Vocab, "vocab", "", "BPE vocabulary (default: the one shipped with the model)")
	f.StringArrayVar(&c.Images, "image", nil, "image file (repeatable)")
	f.StringVar(&c.Pixels, "pixels", "", "safetensors file with tensor \"pixels\" [N,3,H,W], already preprocessed")
	f.StringArrayVar(&c.Texts, "text", nil, "text to embed (repeatable)")
	f.BoolVar(&c.Normalize, "normalize", false, "L2-normalise the features")
	rootCmd.AddCommand(cmd)
}

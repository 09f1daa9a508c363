package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/internal/inputfile"
)

func init() {
	var model string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [--model PATH]",
		Short: "Show the architecture, size and naming scheme of a CLIP checkpoint",
		Long: "inspect reads a CLIP checkpoint (a .safetensors file in OpenAI/open_clip or Hugging Face\n" +
			"naming, or a model folder), checks every tensor's name, shape and dtype, and prints the\n" +
			"inferred architecture. Without --model it inspects the tiny model embedded in the binary.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := resolveModelPath(model)
			if err != nil {
				return err
			}
			if model == "" {
				model = "(embedded default model) " + path
			}
			if err := inputfile.CheckAny(path); err != nil {
				return fmt.Errorf("inspect: %w", err)
			}
			info, err := checkpoint.Inspect(path)
			if err != nil {
				return err
			}
			if asJSON {
				return info.WriteJSON(cmd.OutOrStdout(), model)
			}
			return info.WriteText(cmd.OutOrStdout(), model)
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "checkpoint file (.safetensors) or model folder (default: the embedded tiny model)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	rootCmd.AddCommand(cmd)
}

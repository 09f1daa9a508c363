package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/mma"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/safetensors"
)

func init() {
	var runDir, space string
	var client, top int
	var images []string
	cmd := &cobra.Command{
		Use:   "predict --run DIR --client N --image FILE...",
		Short: "Classify images with one client's personalised pFedMMA model from a finished run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(images) == 0 {
				return fmt.Errorf("predict: no --image given")
			}
			info, err := experiment.ReadRunInfo(runDir)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			sp, ok := info.ClientSpace[client]
			if !ok {
				return fmt.Errorf("predict: run %s has no client %d", runDir, client)
			}
			if space != "" {
				sp = -1
				for i, s := range info.Spaces {
					if s.Name == space {
						sp = i
					}
				}
				if sp < 0 {
					return fmt.Errorf("predict: run %s has no label space %q", runDir, space)
				}
			}
			m, tok, err := experiment.LoadModel(info.Model, info.Vocab)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			path := filepath.Join(runDir, "adapters", fmt.Sprintf("client_%03d.safetensors", client))
			f, err := safetensors.Open(path)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			params, err := f.Float32All()
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			c := m.W.Config
			a := mma.New(info.Adapters, c.Vision.Width, c.Text.Width, nil)
			if err := a.Load(params); err != nil {
				return fmt.Errorf("predict: %s: %w", path, err)
			}
			l, err := mma.NewLearner(m, a, nil)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			l.Attach()
			var names []string
			var tokens []int
			for _, ci := range info.Spaces[sp].Classes {
				name := info.Classes[ci]
				names = append(names, name)
				ids, err := tok.Tokenize(promptFor(info.Template, name), c.Text.ContextLength, false)
				if err != nil {
					return fmt.Errorf("predict: %w", err)
				}
				tokens = append(tokens, ids...)
			}
			if err := l.SetClasses(tokens, len(names)); err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			txt := append([]float32(nil), l.TextFeatures(false)...)
			vals, err := preprocess.CLIPTransform(c.Vision.ImageSize).EvalFiles(cmd.Context(), images, 0)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for i, v := range vals {
				prefix := mma.ImagePrefix(m, info.Adapters.Start, v, 1, nil)
				logits := l.Logits(prefix, 1, txt)
				probs := softmax(logits)
				order := make([]int, len(names))
				for j := range order {
					order[j] = j
				}
				sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
				fmt.Fprintf(tw, "%s\n", images[i])
				for r := 0; r < min(top, len(names)); r++ {
					fmt.Fprintf(tw, "  %d.\t%s\t%6.2f%%\n", r+1, names[order[r]], 100*probs[order[r]])
				}
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&runDir, "run", "", "output folder of a finished `pfedmma run`")
	f.IntVar(&client, "client", 0, "client ID")
	f.StringArrayVar(&images, "image", nil, "image file (repeatable)")
	f.StringVar(&space, "space", "", "label space to classify over (default: the client's training space; e.g. base, novel, all)")
	f.IntVar(&top, "top", 5, "classes to print per image")
	rootCmd.AddCommand(cmd)
}

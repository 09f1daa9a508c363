package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/preprocess"
)

func init() {
	var model, vocab, classes, template string
	var images []string
	var top int
	cmd := &cobra.Command{
		Use:   `zeroshot --model PATH [--vocab FILE] --classes "a,b,c" [--template "a photo of a {}."] --image FILE...`,
		Short: "Classify images zero-shot against class names; prints each image's top-5 classes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var names []string
			for _, c := range strings.Split(classes, ",") {
				if c = strings.TrimSpace(c); c != "" {
					names = append(names, c)
				}
			}
			if len(names) == 0 {
				return fmt.Errorf("zeroshot: --classes is empty")
			}
			if len(images) == 0 {
				return fmt.Errorf("zeroshot: no --image given")
			}
			if top < 1 {
				return fmt.Errorf("zeroshot: --top %d: want at least 1 (the number of classes printed per image)", top)
			}
			if !strings.Contains(template, "{}") {
				return fmt.Errorf("zeroshot: --template %q has no {} placeholder", template)
			}
			m, tok, err := loadModel(model, vocab, true)
			if err != nil {
				return fmt.Errorf("zeroshot: %w", err)
			}
			prompts := make([]string, len(names))
			for i, c := range names {
				prompts[i] = promptFor(template, c)
			}
			ids, err := tokenizeAll(tok, prompts, m.W.Config.Text.ContextLength)
			if err != nil {
				return fmt.Errorf("zeroshot: %w", err)
			}
			txt, err := encodeTextsBatched(cmd.Context(), m, ids, len(names), 256)
			if err != nil {
				return fmt.Errorf("zeroshot: %w", err)
			}
			S, E := m.W.Config.Vision.ImageSize, m.W.Config.EmbedDim
			if err := checkImageMemory("zeroshot", len(images), S); err != nil {
				return err
			}
			vals, err := preprocess.CLIPTransform(S).EvalFiles(cmd.Context(), images, 0)
			if err != nil {
				return fmt.Errorf("zeroshot: %w", err)
			}
			var px []float32
			for _, v := range vals {
				px = append(px, v...)
			}
			img, err := encodeImagesBatched(cmd.Context(), m, px, len(images), 32)
			if err != nil {
				return fmt.Errorf("zeroshot: %w", err)
			}
			logits := clip.Logits(img, txt, len(images), len(names), E, m.W.LogitScale)
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for i, path := range images {
				probs := softmax(logits[i*len(names) : (i+1)*len(names)])
				order := make([]int, len(names))
				for j := range order {
					order[j] = j
				}
				sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
				fmt.Fprintf(tw, "%s\n", path)
				for r := 0; r < min(top, len(names)); r++ {
					fmt.Fprintf(tw, "  %d.\t%s\t%6.2f%%\n", r+1, names[order[r]], 100*probs[order[r]])
				}
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "CLIP checkpoint: .safetensors file or model folder (default: the embedded tiny model)")
	f.StringVar(&vocab, "vocab", "", "BPE vocabulary (default: the one shipped with the model)")
	f.StringVar(&classes, "classes", "", "comma-separated class names")
	f.StringVar(&template, "template", "a photo of a {}.", "prompt template; {} is replaced by the class name")
	f.StringArrayVar(&images, "image", nil, "image file (repeatable)")
	f.IntVar(&top, "top", 5, "classes to print per image (≥ 1)")
	rootCmd.AddCommand(cmd)
}

// softmax returns the probabilities of logits.
func softmax(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(logits))
	var s float64
	for i, v := range logits {
		p[i] = math.Exp(float64(v) - mx)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// promptFor fills a prompt template with a class name (underscores become
// spaces, as in the reference code).
func promptFor(template, class string) string {
	return strings.ReplaceAll(template, "{}", strings.ReplaceAll(class, "_", " "))
}

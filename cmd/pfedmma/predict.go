package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() {
	var runDir, space, method string
	var client, top int
	var images []string
	cmd := &cobra.Command{
		Use:   "predict --run DIR [--method NAME] [--client N] [--space NAME|all] [--top K] --image FILE [FILE...]",
		Short: "Classify images with one site's personalised model from a finished run",
		Long: `Classify images with the model one site (client) ended a finished run with.

The run folder's run.json names the model, the prompt template and the label
spaces; the site's trained tensors come from the run's per-site files.
--method picks one of the run's methods (default: pfedmma when it ran, else
the first). --space picks the label space (default: the one the site trained
over; "all" means every class of the dataset). Images may follow --image as
further arguments.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			images = append(images, args...)
			if runDir == "" {
				return fmt.Errorf("predict: no --run DIR given (the output folder of a finished pfedmma run)")
			}
			if len(images) == 0 {
				return fmt.Errorf("predict: no --image given")
			}
			if top < 1 {
				return fmt.Errorf("predict: --top %d: want at least 1", top)
			}
			for _, img := range images {
				if err := inputfile.Check(img); err != nil {
					return fmt.Errorf("predict: --image %w", err)
				}
			}
			info, err := experiment.ReadRunInfo(runDir)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			if method == "" {
				method = info.Methods[0]
				if slices.Contains(info.Methods, "pfedmma") {
					method = "pfedmma"
				}
			}
			if !slices.Contains(info.Methods, method) {
				return fmt.Errorf("predict: run %s did not run method %q (it ran %v)", runDir, method, info.Methods)
			}
			meth, err := methods.Get(method)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			sp, ok := info.ClientSpace[client]
			if !ok {
				return fmt.Errorf("predict: --client %d: run %s has clients 0..%d", client, runDir, len(info.ClientSpace)-1)
			}
			classes := info.Spaces[sp].Classes
			spaceName := info.Spaces[sp].Name
			if space != "" {
				i := slices.IndexFunc(info.Spaces, func(s protocol.Space) bool { return s.Name == space })
				switch {
				case i >= 0:
					classes, spaceName = info.Spaces[i].Classes, space
				case space == "all":
					classes, spaceName = nil, "all"
					for c := range info.Classes {
						classes = append(classes, c)
					}
				default:
					var names []string
					for _, s := range info.Spaces {
						names = append(names, s.Name)
					}
					return fmt.Errorf("predict: --space %q: run %s has label spaces %v and all", space, runDir, names)
				}
			}
			var sec config.Section
			if src, ok := info.Sections[method]; ok && meth.DefaultConfig() != nil {
				sec = meth.DefaultConfig()
				dec := yaml.NewDecoder(strings.NewReader(src))
				dec.KnownFields(true)
				if err := dec.Decode(sec); err != nil && err != io.EOF {
					return fmt.Errorf("predict: %s: field \"sections\": %s: %w", filepath.Join(runDir, experiment.RunInfoFile), method, err)
				}
				if err := config.CheckSection(method, sec); err != nil {
					return fmt.Errorf("predict: %s: field \"sections\": %w", filepath.Join(runDir, experiment.RunInfoFile), err)
				}
			}
			saved := tensor.Named{}
			path := filepath.Join(runDir, info.Sites[method], fmt.Sprintf("client_%03d.safetensors", client))
			if _, err := os.Stat(path); err == nil {
				if err := inputfile.Check(path); err != nil {
					return fmt.Errorf("predict: %w", err)
				}
				f, err := safetensors.Open(path)
				if err != nil {
					return fmt.Errorf("predict: %w", err)
				}
				saved, err = f.Float32All()
				f.Close()
				if err != nil {
					return fmt.Errorf("predict: %w", err)
				}
			} else if method != "zeroshot" {
				return fmt.Errorf("predict: site %d of %s: %w (was the run made with output.save_adapters?)", client, method, err)
			}
			m, tok, err := experiment.LoadModel(info.Model, info.Vocab)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			p, err := meth.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: info.Template}, sec, saved)
			if err != nil {
				return fmt.Errorf("predict: %s: %w", path, err)
			}
			c := m.W.Config
			var names []string
			for _, ci := range classes {
				names = append(names, info.Classes[ci])
			}
			vals, err := preprocess.CLIPTransform(c.Vision.ImageSize).EvalFiles(cmd.Context(), images, 0)
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			if len(vals) > 0 {
				// one blank image first: an error here comes from the run's
				// files (a site file lacking a tensor), not from the images
				if _, err := p.Logits(make([]float32, len(vals[0])), 1, names); err != nil {
					return fmt.Errorf("predict: site %d of %s (%s): %w", client, method, path, err)
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s, site %d, label space %s (%d classes)\n", method, client, spaceName, len(names))
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			for i, v := range vals {
				logits, err := p.Logits(v, 1, names)
				if err != nil {
					return fmt.Errorf("predict: %s: %w", images[i], err)
				}
				probs := softmax(logits)
				order := make([]int, len(names))
				for j := range order {
					order[j] = j
				}
				sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
				fmt.Fprintf(tw, "%s\n", images[i])
				for r := 0; r < min(top, len(names)); r++ {
					pr := probs[order[r]]
					if pr != pr {
						return fmt.Errorf("predict: %s: the model's scores are not finite (NaN); the run's parameters are damaged", images[i])
					}
					fmt.Fprintf(tw, "  %d.\t%s\t%6.2f%%\n", r+1, names[order[r]], 100*pr)
				}
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&runDir, "run", "", "output folder (`DIR`) of a finished pfedmma run")
	f.StringVar(&method, "method", "", "method whose site model to use (default: pfedmma, or the run's first method)")
	f.IntVar(&client, "client", 0, "client (site) ID, from 0 (see run.json)")
	f.StringArrayVar(&images, "image", nil, "image file (repeatable; more files may follow as arguments)")
	f.StringVar(&space, "space", "", "label space to classify over (default: the site's training space; e.g. base, novel, all)")
	f.IntVar(&top, "top", 5, "classes to print per image (≥ 1)")
	rootCmd.AddCommand(cmd)
}

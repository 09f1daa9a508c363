package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

const fixtureHelp = `Inputs are safetensors files in the reference fixtures' layout
(testdata/README.md):

  --params INIT.safetensors   the method's parameters under the reference code's
                              names (adapter_learner.*, prompt_learner.*, gating.*,
                              experts ...)
  --batch FILE.safetensors    the data: images [B,3,S,S] (normalised), labels [B]
                              (I64), tokens [C,ctx] (I64: the class prompts, with
                              SOT, the n_ctx placeholder tokens, class, '.', EOT);
                              for a round client<i>.images / client<i>.labels.
                              Repeat --batch to merge files (the first wins).

Hyper-parameters come from the files' __metadata__ (n_ctx, lr, momentum,
weight_decay, logit_scale, bottleneck, num_prompt, mu, temp, batch_size,
local_epochs, ot, eps, top_percent, adapter_scale, tau, lambda, ema,
optimizer, domain, seed, ...); --set key=value overrides or adds one (a key
the method's step and round do not read is refused, listing the keys they
read; <method>.key, the run configuration's spelling, is the same key). Nothing is fixed to the
fixtures' values. Non-finite inputs (NaN, Inf in a tensor or a
hyper-parameter), empty batches, float labels and client indices with a gap
are refused, and so are non-finite outputs (nothing is written). ADAPT reads the client's domain from
metadata 'domain' or a tensor 'domain' (round: client<i>.domain), and the
other domains' EMA targets from ema_target.text_prompt.<j>.

The output file holds, under the reference's names:
  step:  logits, loss (and each loss term), the features the method computes,
         grad.<param> and step1.<param> (after one step of the method's
         optimizer from a fresh state: SGD; ADAPT: AdamW)
  round: client<i>.trained.<param> (what each client holds after local
         training) and global.<param> (what the server holds after aggregating)`

func init() {
	for _, kind := range []string{"step", "round"} {
		var method, model, params, out string
		var batches, sets []string
		cmd := &cobra.Command{
			Use:   kind + " --method NAME --model M --params INIT.safetensors --batch FILE.safetensors [--set key=value]... --out OUT.safetensors",
			Short: map[string]string{"step": "One training step of a method on given inputs (the reference fixtures' contract)", "round": "One federated round of a method on given inputs (the reference fixtures' contract)"}[kind],
			Long:  fixtureHelp,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				meth, err := methods.Get(method)
				if err != nil {
					return fmt.Errorf("%s: %w", kind, err)
				}
				if out == "" || params == "" || len(batches) == 0 {
					return fmt.Errorf("%s: --params, --batch and --out are required", kind)
				}
				if err := checkOutFile(out); err != nil {
					return fmt.Errorf("%s: %w", kind, err)
				}
				if err := checkMethodKeys(meth, methodSets(method, sets)); err != nil {
					return fmt.Errorf("%s: %w", kind, err)
				}
				f, err := loadFixture(model, params, batches, methodSets(method, sets))
				if err != nil {
					return fmt.Errorf("%s: %w", kind, err)
				}
				if err := backboneFits(meth, f.Model); err != nil {
					return fmt.Errorf("%s: %w", kind, err)
				}
				var res tensor.Named
				if kind == "step" {
					st, ok := meth.(fixture.Stepper)
					if !ok {
						return fmt.Errorf("step: method %s has no fixture step", method)
					}
					res, err = st.Step(cmd.Context(), f)
				} else {
					res, err = fixture.RunRound(cmd.Context(), meth, f)
				}
				if err != nil {
					return fmt.Errorf("%s %s: %w", kind, method, err)
				}
				if err := checkFiniteOutputs(res); err != nil {
					return fmt.Errorf("%s %s: %w; nothing written to %s", kind, method, err, out)
				}
				meta := map[string]string{"method": method, "command": kind}
				if err := safetensors.Write(out, res, nil, meta); err != nil {
					return fmt.Errorf("%s: %w", kind, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d tensors written to %s\n", kind, len(res), out)
				return nil
			},
		}
		fl := cmd.Flags()
		fl.StringVar(&method, "method", "", "method name (`pfedmma methods`)")
		fl.StringVar(&model, "model", "", "CLIP checkpoint (default: the embedded tiny model)")
		fl.StringVar(&params, "params", "", "initial parameters (safetensors, reference names)")
		fl.StringArrayVar(&batches, "batch", nil, "inputs (safetensors; repeatable)")
		fl.StringArrayVar(&sets, "set", nil, "hyper-parameter override key=value (repeatable)")
		fl.StringVar(&out, "out", "", "output safetensors file")
		rootCmd.AddCommand(cmd)
	}
}

// backboneFits refuses a method that runs a ViT's blocks or tokens (its
// depth with default settings on a 12-block ViT is not the image
// features) on a ResNet CLIP, naming the methods that run there.
func backboneFits(meth methods.Method, m *clip.Model) error {
	if m == nil || m.W == nil || !m.W.Config.Vision.ResNet {
		return nil
	}
	if onFeatures(meth) {
		return nil
	}
	var ok []string
	for _, other := range methods.All() {
		if onFeatures(other) {
			ok = append(ok, other.Info().Name)
		}
	}
	return fmt.Errorf("method %s needs a ViT image encoder (it runs the ViT's blocks or patch tokens) but the model is a ResNet CLIP: use a ViT checkpoint, or a method on image features (%s)",
		meth.Info().Name, strings.Join(ok, ", "))
}

// onFeatures says whether meth, with its default settings, runs on the
// image features alone (so on a ResNet CLIP too).
func onFeatures(meth methods.Method) bool {
	d, err := meth.Depth(meth.DefaultConfig(), 12)
	return err == nil && (d == methods.Features || d == methods.AnyDepth)
}

// methodSets strips the method's own section from --set keys, so that
// "fedpgp.class_token_position=middle" (the run configuration's key) is the
// fixture key "class_token_position" for --method fedpgp.
func methodSets(method string, sets []string) []string {
	out := make([]string, len(sets))
	for i, kv := range sets {
		out[i] = strings.TrimPrefix(kv, method+".")
	}
	return out
}

// checkMethodKeys refuses a --set key that meth's step and round do not
// read (its fixture.Settings.FixtureKeys): a key another method reads
// would be ignored silently (byte-identical outputs). A method that lists
// no keys has no fixture step or round, and any --set is refused.
func checkMethodKeys(meth methods.Method, sets []string) error {
	s, ok := meth.(fixture.Settings)
	if !ok {
		if len(sets) > 0 {
			return fmt.Errorf("--set %s: method %s reads no fixture hyper-parameters (it has no fixture step or round)", sets[0], meth.Info().Name)
		}
		return nil
	}
	return fixture.CheckKeys(meth.Info().Name, s, sets)
}

// loadFixture reads the model, then the fixture files (fixture.Load).
func loadFixture(model, params string, batches, sets []string) (*fixture.Fixture, error) {
	path, err := resolveModelPath(model)
	if err != nil {
		return nil, err
	}
	m, _, err := loadModel(path, "", false)
	if err != nil {
		return nil, err
	}
	return fixture.Load(m, params, batches, sets)
}

// checkFiniteOutputs refuses a result holding NaN or ±Inf (a diverged step:
// too large a learning rate or scale), naming the first such tensor.
func checkFiniteOutputs(res tensor.Named) error {
	for _, name := range slices.Sorted(maps.Keys(res)) {
		for i, x := range res[name].Data {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("output %q holds %v at index %d: the hyper-parameters make the computation diverge", name, x, i)
			}
		}
	}
	return nil
}

// checkOutFile refuses an --out that names an existing folder, before any
// work is done.
func checkOutFile(out string) error {
	if err := atomicfile.CheckTarget(out); err != nil {
		return fmt.Errorf("--out %w", err)
	}
	return nil
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/safetensors"
)

// fixtureFlags are the flags of `pfedmma step` and `pfedmma round`.
type fixtureFlags struct {
	method, model, params, out string
	batches, sets              []string
}

func init() {
	for _, kind := range []string{"step", "round"} {
		var x fixtureFlags
		cmd := &cobra.Command{
			Use:   kind + " --method NAME --model M --params INIT.safetensors --batch FILE.safetensors [--set key=value]... --out OUT.safetensors",
			Short: map[string]string{"step": "One training step of a method on given inputs (the reference fixtures' contract)", "round": "One federated round of a method on given inputs (the reference fixtures' contract)"}[kind],
			Long:  fixture.CommandHelp,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				return runFixtureCommand(cmd, kind, x)
			},
		}
		fl := cmd.Flags()
		fl.StringVar(&x.method, "method", "", "method name (`pfedmma methods`)")
		fl.StringVar(&x.model, "model", "", "CLIP checkpoint (default: the embedded tiny model)")
		fl.StringVar(&x.params, "params", "", "initial parameters (safetensors, reference names)")
		fl.StringArrayVar(&x.batches, "batch", nil, "inputs (safetensors; repeatable)")
		fl.StringArrayVar(&x.sets, "set", nil, "hyper-parameter override key=value (repeatable)")
		fl.StringVar(&x.out, "out", "", "output safetensors file")
		rootCmd.AddCommand(cmd)
	}
}

// runFixtureCommand runs `pfedmma step` or `round` (kind): it checks the
// flags, loads the fixture, runs the method and writes its outputs.
func runFixtureCommand(cmd *cobra.Command, kind string, x fixtureFlags) error {
	meth, err := methods.Get(x.method)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	if x.out == "" || x.params == "" || len(x.batches) == 0 {
		return fmt.Errorf("%s: --params, --batch and --out are required", kind)
	}
	if err := checkOutFile(x.out); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	sets := fixture.MethodSets(x.method, x.sets)
	if err := checkMethodKeys(meth, sets); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	f, err := loadFixture(x.model, x.params, x.batches, sets)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	res, err := fixture.RunCommand(cmd.Context(), kind, x.method, meth, f)
	if err != nil {
		return err
	}
	if err := fixture.CheckFiniteOutputs(res); err != nil {
		return fmt.Errorf("%s %s: %w; nothing written to %s", kind, x.method, err, x.out)
	}
	meta := map[string]string{"method": x.method, "command": kind}
	if err := safetensors.Write(x.out, res, nil, meta); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %d tensors written to %s\n", kind, len(res), x.out)
	return nil
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

// checkOutFile refuses an --out that names an existing folder, before any
// work is done.
func checkOutFile(out string) error {
	if err := atomicfile.CheckTarget(out); err != nil {
		return fmt.Errorf("--out %w", err)
	}
	return nil
}

package parity

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/safetensors"
)

// Command is `pfedmma step` or `pfedmma round` (Kind) as its flags give it.
type Command struct {
	Kind, Method string
	// Model is the CLIP checkpoint (empty: the embedded one, which
	// ResolveModel returns).
	Model        string
	ResolveModel func(string) (string, error)
	// LoadWeights reads a CLIP checkpoint (experiment.LoadWeights; parity
	// cannot import experiment, whose methods import parity).
	LoadWeights func(path string) (*clip.Model, error)
	// Params is the initial parameters' file, Batches the inputs' files,
	// Sets the hyper-parameter overrides key=value and Out the output file.
	Params, Out   string
	Batches, Sets []string
}

// Run checks c's flags, loads the fixture, runs the method and writes its
// outputs; it returns the number of tensors written.
func Run(ctx context.Context, c Command) (int, error) {
	meth, err := methods.Get(c.Method)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.Kind, err)
	}
	if c.Out == "" || c.Params == "" || len(c.Batches) == 0 {
		return 0, fmt.Errorf("%s: --params, --batch and --out are required", c.Kind)
	}
	if err := atomicfile.CheckTarget(c.Out); err != nil {
		return 0, fmt.Errorf("%s: --out %w", c.Kind, err)
	}
	sets := MethodSets(c.Method, c.Sets)
	if err := CheckMethodKeys(meth, sets); err != nil {
		return 0, fmt.Errorf("%s: %w", c.Kind, err)
	}
	f, err := c.load(sets)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.Kind, err)
	}
	res, err := RunCommand(ctx, c.Kind, c.Method, meth, f)
	if err != nil {
		return 0, err
	}
	if err := CheckFiniteOutputs(res); err != nil {
		return 0, fmt.Errorf("%s %s: %w; nothing written to %s", c.Kind, c.Method, err, c.Out)
	}
	meta := map[string]string{"method": c.Method, "command": c.Kind}
	if err := safetensors.Write(c.Out, res, nil, meta); err != nil {
		return 0, fmt.Errorf("%s: %w", c.Kind, err)
	}
	return len(res), nil
}

// CheckMethodKeys refuses a --set key that meth's step and round do not
// read (its Settings.FixtureKeys): a key another method reads
// would be ignored silently (byte-identical outputs). A method that lists
// no keys has no fixture step or round, and any --set is refused.
func CheckMethodKeys(meth methods.Method, sets []string) error {
	s, ok := SettingsOf(meth)
	if !ok {
		if len(sets) > 0 {
			return fmt.Errorf("--set %s: method %s reads no fixture hyper-parameters (it has no fixture step or round)", sets[0], meth.Info().Name)
		}
		return nil
	}
	return CheckKeys(meth.Info().Name, s, sets)
}

// load reads the model's weights, then the fixture files (Load).
func (c Command) load(sets []string) (*Fixture, error) {
	path, err := c.ResolveModel(c.Model)
	if err != nil {
		return nil, err
	}
	m, err := c.LoadWeights(path)
	if err != nil {
		return nil, err
	}
	return Load(m, c.Params, c.Batches, sets)
}

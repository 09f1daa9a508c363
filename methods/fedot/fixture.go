package fedot

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/tensor"
)

// The reference-fixture contract (`pfedmma step` / `pfedmma round`): no
// authors' code exists for FedOT, so there are no reference fixtures; the
// contract runs the production client (methods.LearnerStep, methods.Round)
// and is tested against finite differences and the optimizer.

// SettingsFrom implements methods.FixtureSettings: the variant and the
// number of blocks from the parameters' names and shapes ("x" [r, d/r,
// d/r]: FedOT, FedOT(+B); "w_1": FedLT; "adapter.down": FedAdapter),
// "variant" (all_global, all_local), "tau" and "normalize_classifier" from
// the metadata.
func (m Method) SettingsFrom(f *methods.Fixture) (config.Section, error) {
	s := m.DefaultConfig().(*Settings)
	switch {
	case f.Params[ParamLinear] != nil:
		s.Variant = VariantFedLT
	case f.Params[ParamDown] != nil:
		s.Variant = VariantFedAdapter
	case f.Params[ParamX] != nil:
		x := f.Params[ParamX]
		if len(x.Shape) != 3 || x.Shape[1] != x.Shape[2] {
			return nil, fmt.Errorf("fedot: parameter %q has shape %v, want [r, d/r, d/r]", ParamX, x.Shape)
		}
		s.Blocks = x.Shape[0]
	default:
		return nil, fmt.Errorf("fedot: the parameters have none of %q, %q, %q", ParamX, ParamLinear, ParamDown)
	}
	if v, ok := f.Meta["variant"]; ok {
		if s.Variant != VariantFedOT || (v != VariantFedOT && v != VariantAllGlobal && v != VariantAllLocal) {
			return nil, fmt.Errorf("fedot: variant %q does not match the parameters (%s)", v, s.Variant)
		}
		s.Variant = v
	}
	tau, err := f.FloatOr("tau", s.Tau)
	if err != nil {
		return nil, err
	}
	s.Tau = tau
	if v, ok := f.Meta["normalize_classifier"]; ok {
		s.NormalizeClassifier = v == "1" || v == "true" || v == "True"
	}
	if f.Params[ParamClassifier] == nil {
		return nil, fmt.Errorf("fedot: parameter %q missing", ParamClassifier)
	}
	if err := config.CheckSection("fedot", s); err != nil {
		return nil, err
	}
	return s, nil
}

// Step implements methods.Stepper: one step of the production client.
func (m Method) Step(ctx context.Context, f *methods.Fixture) (tensor.Named, error) {
	sec, err := m.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	return methods.LearnerStep(ctx, m, sec, f)
}

// Scorer implements methods.BatchScorer: the client's current parameters.
func (c *Client) Scorer() (eval.Scorer, error) {
	if err := c.w.Prepare(c.P); err != nil {
		return nil, err
	}
	return scorer{c}, nil
}

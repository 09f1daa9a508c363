package clipadapter

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/tensor"
)

// The reference-fixture contract (`pfedmma step` / `pfedmma round`): the
// fixtures hold no CLIP-Adapter run, so the contract runs the production
// client (methods.LearnerStep, methods.Round) and is tested against finite
// differences and the optimizer.

// SettingsFrom implements methods.FixtureSettings: the reduction from the
// first matrix's shape ([d/r, d]), the residual ratio from the metadata
// "ratio" (0.2 when absent).
func (m Method) SettingsFrom(f *methods.Fixture) (config.Section, error) {
	s := m.DefaultConfig().(*Settings)
	w1 := f.Params[ParamW1]
	if w1 == nil || len(w1.Shape) != 2 || w1.Shape[0] == 0 || w1.Shape[1]%w1.Shape[0] != 0 {
		return nil, fmt.Errorf("clip_adapter: parameter %q missing or not [d/r, d]", ParamW1)
	}
	s.Reduction = w1.Shape[1] / w1.Shape[0]
	ratio, err := f.FloatOr("ratio", s.Ratio)
	if err != nil {
		return nil, err
	}
	s.Ratio = ratio
	if err := config.CheckSection("clip_adapter", s); err != nil {
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

// Scorer implements methods.BatchScorer: the client's own adapter.
func (c *Client) Scorer() (eval.Scorer, error) { return scorer{c.w, c.P}, nil }

package cliplora

import (
	"context"
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// The reference-fixture contract (`pfedmma step` / `pfedmma round`): the
// contract runs the production client (parity.LearnerStep, parity.Round).
// testdata/clip_lora holds fixtures made by the authors' code
// (MaxZanella/CLIP-LoRA, federated with the pFedMMA authors' FedAvg), which
// external_test.go checks against the production client and a Coordinator
// round.

// SettingsFrom implements parity.Settings: the rank from the A
// factors' shape ([r, D]), "alpha" (1), "scale" (sqrt) and "dropout" from
// the metadata — 0 when absent, so that a step is deterministic without a
// seed (with dropout the masks come from PCG(seed, 0)).
func (m Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	s := m.DefaultConfig().(*Settings)
	s.Dropout = 0
	rank := 0
	for name := range f.Params {
		if IsDelta(name) {
			s.Aggregate = AggregateProduct
		}
	}
	for name, t := range f.Params {
		if strings.HasPrefix(name, "lora.") && strings.HasSuffix(name, ".A") {
			if len(t.Shape) != 2 || (rank != 0 && t.Shape[0] != rank) {
				return nil, fmt.Errorf("clip_lora: parameter %q has shape %v, want [r, D] with one r", name, t.Shape)
			}
			rank = t.Shape[0]
		}
	}
	if rank == 0 {
		return nil, fmt.Errorf("clip_lora: no LoRA factor (lora.<tower>.<block>.<q|k|v>.A) in the parameters")
	}
	s.Rank = rank
	var err error
	if s.Alpha, err = f.FloatOr("alpha", s.Alpha); err != nil {
		return nil, err
	}
	if s.Dropout, err = f.FloatOr("dropout", 0); err != nil {
		return nil, err
	}
	if v, ok := f.Meta["scale"]; ok {
		s.Scale = v
	}
	if err := config.CheckSection("clip_lora", s); err != nil {
		return nil, err
	}
	return s, nil
}

// Step implements parity.Stepper: one step of the production client
// through both encoders.
func (m Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	sec, err := m.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	return parity.LearnerStep(ctx, m, sec, f)
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"alpha", "batch_size", "dropout", "local_epochs", "lr", "momentum", "scale", "seed",
		"weight_decay",
	}
}

var _ parity.Method = Method{}

package parity

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/tensor"
)

// Entry is what differs per method in reference parity, as data: the
// fixture metadata keys its step and round read, and how they become the
// method's settings — fixed values, then the metadata keys, then values
// read off the parameters' shapes, each decoded by the method's own
// settings decoding (the run configuration's `<method>.<key>`, see
// config.Experiment.Set) and checked by its Check. The step runs through
// the production client (LearnerStep), the round through
// federation.Coordinator (Round); nothing of it is in the method's
// package.
type Entry struct {
	// Keys are the metadata keys the method's step and round read
	// (Settings.FixtureKeys): the common ones (lr, momentum, weight_decay,
	// batch_size, local_epochs, seed) where read, and those of Meta.
	Keys []string
	// Fixed are settings (key, YAML value) set first, in order.
	Fixed [][2]string
	// Meta maps a metadata key to the settings key it sets, when present.
	Meta map[string]string
	// Dims set settings from the parameters' shapes.
	Dims []Dim
	// Present set settings when a parameter is present.
	Present []Present
}

// Dim sets settings key Key to dimension Axis of every parameter whose
// name starts with Prefix and ends with Suffix, each of Rank dimensions:
// all must agree, and one at least must be present.
type Dim struct {
	Prefix, Suffix string
	Rank, Axis     int
	Key            string
}

// Present sets settings key Key to Value when a parameter whose name
// starts with Prefix and ends with Suffix is present.
type Present struct {
	Prefix, Suffix string
	Key, Value     string
}

// table holds the methods whose reference parity is data alone, by
// registry name.
var table = map[string]Entry{
	// CLIP-LoRA: the rank from the A factors' [r, D]; alpha, scale and
	// dropout from the metadata (dropout 0 when absent, so that a step is
	// deterministic without a seed; with dropout the masks come from
	// PCG(seed, 0)); aggregate product when the parameters hold a
	// projection's whole change (lora.<tower>.<block>.<part>.delta).
	"clip_lora": {
		Keys:    []string{"alpha", "batch_size", "dropout", "local_epochs", "lr", "momentum", "scale", "seed", "weight_decay"},
		Fixed:   [][2]string{{"dropout", "0"}},
		Meta:    map[string]string{"alpha": "alpha", "dropout": "dropout", "scale": "scale"},
		Dims:    []Dim{{Prefix: "lora.", Suffix: ".A", Rank: 2, Axis: 0, Key: "rank"}},
		Present: []Present{{Prefix: "lora.", Suffix: ".delta", Key: "aggregate", Value: "product"}},
	},
}

// tabled is a method of the table: a Method with its Entry's Stepper and
// Settings.
type tabled struct {
	methods.Method
	e Entry
}

// StepperOf returns meth's fixture step: the method's own Stepper hook,
// or, for a method of the table, the production client's step
// (LearnerStep) on the settings its Entry reads.
func StepperOf(meth methods.Method) (Stepper, bool) {
	if e, ok := table[meth.Info().Name]; ok {
		return tabled{meth, e}, true
	}
	s, ok := meth.(Stepper)
	return s, ok
}

// SettingsOf returns how meth's settings are read from a fixture: the
// method's own Settings hook, or its table Entry.
func SettingsOf(meth methods.Method) (Settings, bool) {
	if e, ok := table[meth.Info().Name]; ok {
		return tabled{meth, e}, true
	}
	s, ok := meth.(Settings)
	return s, ok
}

// FixtureKeys implements Settings.
func (t tabled) FixtureKeys() []string { return slices.Clone(t.e.Keys) }

// Step implements Stepper: LearnerStep on the Entry's settings.
func (t tabled) Step(ctx context.Context, f *Fixture) (tensor.Named, error) {
	sec, err := t.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	return LearnerStep(ctx, t.Method, sec, f)
}

// SettingsFrom implements Settings: the method's default settings, then
// the Entry's Fixed, Meta, Dims and Present, each decoded as the run
// configuration's `<method>.<key>=<value>`; the result passes the
// section's Check.
func (t tabled) SettingsFrom(f *Fixture) (config.Section, error) {
	name := t.Info().Name
	x := &config.Experiment{Sections: map[string]config.Section{name: t.DefaultConfig()}}
	set := func(key, value, from string) error {
		if err := x.Set(name+"."+key, value); err != nil {
			return fmt.Errorf("%s: %s: %w", name, from, err)
		}
		return nil
	}
	for _, kv := range t.e.Fixed {
		if err := set(kv[0], kv[1], "fixed setting "+kv[0]); err != nil {
			return nil, err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.e.Meta)) {
		if v, ok := f.Meta[k]; ok {
			if err := set(t.e.Meta[k], v, fmt.Sprintf("hyper-parameter %s=%q", k, v)); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range t.e.Dims {
		n, err := d.read(f.Params)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := set(d.Key, strconv.Itoa(n), "parameter shapes"); err != nil {
			return nil, err
		}
	}
	for _, p := range t.e.Present {
		if p.in(f.Params) {
			if err := set(p.Key, p.Value, "parameter names"); err != nil {
				return nil, err
			}
		}
	}
	sec := x.Sections[name]
	if err := config.CheckSection(name, sec); err != nil {
		return nil, err
	}
	return sec, nil
}

// read returns the dimension d names, the same in every matching
// parameter.
func (d Dim) read(params tensor.Named) (int, error) {
	n := 0
	for _, name := range slices.Sorted(maps.Keys(params)) {
		if !strings.HasPrefix(name, d.Prefix) || !strings.HasSuffix(name, d.Suffix) {
			continue
		}
		t := params[name]
		if len(t.Shape) != d.Rank || (n != 0 && t.Shape[d.Axis] != n) {
			return 0, fmt.Errorf("parameter %q has shape %v: %s is dimension %d of every %s*%s parameter, %d dimensions each, with one value", name, t.Shape, d.Key, d.Axis, d.Prefix, d.Suffix, d.Rank)
		}
		n = t.Shape[d.Axis]
	}
	if n == 0 {
		return 0, fmt.Errorf("no parameter %s*%s to read %s from", d.Prefix, d.Suffix, d.Key)
	}
	return n, nil
}

// in reports whether a parameter p matches is present.
func (p Present) in(params tensor.Named) bool {
	for name := range params {
		if strings.HasPrefix(name, p.Prefix) && strings.HasSuffix(name, p.Suffix) {
			return true
		}
	}
	return false
}

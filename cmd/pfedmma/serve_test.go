package main

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestServeRobustFlags: serve's robust/DP flags give no wrapper for the
// method's mean, a wrapper otherwise, and are refused (naming the flag)
// when unknown or when the configuration's aggregation section is set too.
func TestServeRobustFlags(t *testing.T) {
	e, err := config.Compose(config.Sources{Preset: config.DefaultPreset})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := (&robustFlags{aggregate: "mean"}).wrapper(e); err != nil || w != nil {
		t.Errorf("--aggregate mean: wrapper %v, error %v; want none", w != nil, err)
	}
	w, err := (&robustFlags{aggregate: "median"}).wrapper(e)
	if err != nil || w == nil {
		t.Fatalf("--aggregate median: wrapper %v, error %v", w != nil, err)
	}
	st := &strategy.FedAvg{Initial: tensor.Named{"w": tensor.New(2)}}
	if got, err := w(st); err != nil || got == st {
		t.Errorf("--aggregate median left the strategy unwrapped (error %v)", err)
	}
	if _, err := (&robustFlags{aggregate: "mode"}).wrapper(e); err == nil || !strings.Contains(err.Error(), "--aggregate") {
		t.Errorf("--aggregate mode: error %v", err)
	}
	hardened, err := config.Compose(config.Sources{Preset: config.DefaultPreset, Sets: []string{"aggregation.rule=median"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&robustFlags{aggregate: "median"}).wrapper(hardened); err == nil || !strings.Contains(err.Error(), "aggregation section") {
		t.Errorf("flags beside aggregation.rule: error %v", err)
	}
	if w, err := (&robustFlags{aggregate: "mean"}).wrapper(hardened); err != nil || w != nil {
		t.Errorf("no flags beside aggregation.rule: wrapper %v, error %v; want the experiment's own", w != nil, err)
	}
}

package config

import (
	"strings"
	"testing"
)

// TestAggregationSection: the aggregation section is off by default, set
// by --set and files with strict keys, refused naming the key when a value
// or a combination cannot work, and part of the fingerprint only through
// the settings in effect.
func TestAggregationSection(t *testing.T) {
	d := Default()
	if d.Aggregation.Active() || d.Aggregation.Rule != RuleMean {
		t.Fatalf("default aggregation is not off: %+v", d.Aggregation)
	}
	e, err := Compose(Sources{Sets: []string{"aggregation.rule=trimmed_mean", "aggregation.trim=0.2",
		"aggregation.clip_norm=3"}})
	if err != nil {
		t.Fatal(err)
	}
	if a := e.Aggregation; a.Rule != RuleTrimmedMean || a.Trim != 0.2 || a.ClipNorm != 3 || !a.Active() {
		t.Errorf("--set gave %+v", a)
	}
	e, err = Compose(Sources{File: "x.yaml", Data: []byte("aggregation:\n  dp: {noise_multiplier: 1.1, clip: 0.5, delta: 1e-6, seed: 4}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if dp := e.Aggregation.DP; !dp.On() || dp.NoiseMultiplier != 1.1 || dp.Clip != 0.5 || dp.Delta != 1e-6 || dp.Seed != 4 {
		t.Errorf("file gave %+v", dp)
	}
	_, err = Compose(Sources{File: "x.yaml", Data: []byte("aggregation:\n  dp:\n    sigma: 1\n")})
	if err == nil || !strings.Contains(err.Error(), "x.yaml: line 3: aggregation.dp.sigma: unknown field") {
		t.Errorf("unknown key: %v", err)
	}

	for _, c := range []struct {
		sets []string
		key  string
	}{
		{[]string{"aggregation.rule=max"}, "aggregation.rule"},
		{[]string{"aggregation.rule=trimmed-mean"}, "aggregation.rule"},
		{[]string{"aggregation.rule=trimmed_mean", "aggregation.trim=0.5"}, "aggregation.trim"},
		{[]string{"aggregation.rule=trimmed_mean", "aggregation.trim=-0.1"}, "aggregation.trim"},
		{[]string{"aggregation.trim=0.2"}, "aggregation.trim"}, // without trimmed_mean
		{[]string{"aggregation.clip_norm=-1"}, "aggregation.clip_norm"},
		{[]string{"aggregation.clip_norm=.nan"}, "aggregation.clip_norm"},
		{[]string{"aggregation.dp.noise_multiplier=-1"}, "aggregation.dp.noise_multiplier"},
		{[]string{"aggregation.dp.noise_multiplier=1", "aggregation.dp.clip=0"}, "aggregation.dp.clip"},
		{[]string{"aggregation.dp.noise_multiplier=1", "aggregation.dp.delta=1"}, "aggregation.dp.delta"},
		{[]string{"aggregation.dp.noise_multiplier=1", "aggregation.dp.delta=0"}, "aggregation.dp.delta"},
		{[]string{"aggregation.dp.noise_multiplier=1", "aggregation.rule=median"}, "aggregation.dp.noise_multiplier"},
		{[]string{"aggregation.dp.noise_multiplier=1", "aggregation.clip_norm=2"}, "aggregation.clip_norm"},
		{[]string{"aggregation.dp.seed=-1"}, "aggregation.dp.seed"},
		{[]string{"aggregation.rules=median"}, "aggregation.rules"},
	} {
		_, err := Compose(Sources{Sets: c.sets})
		if err == nil || !strings.Contains(err.Error(), c.key+":") {
			t.Errorf("%v: %v, want an error naming %s", c.sets, err, c.key)
		}
	}

	fp := d.Fingerprint()
	for _, c := range []struct {
		name    string
		edit    func(*Experiment)
		changes bool
	}{
		{"dp clip while dp is off", func(e *Experiment) { e.Aggregation.DP.Clip = 7 }, false},
		{"dp delta while dp is off", func(e *Experiment) { e.Aggregation.DP.Delta = 1e-3 }, false},
		{"rule median", func(e *Experiment) { e.Aggregation.Rule = RuleMedian }, true},
		{"rule trimmed_mean", func(e *Experiment) { e.Aggregation.Rule = RuleTrimmedMean }, true},
		{"clip_norm", func(e *Experiment) { e.Aggregation.ClipNorm = 1 }, true},
		{"dp on", func(e *Experiment) { e.Aggregation.DP.NoiseMultiplier = 1 }, true},
		{"no section (an older configuration)", func(e *Experiment) { e.Aggregation = Aggregation{} }, false},
	} {
		e := Default()
		c.edit(e)
		if got := e.Fingerprint() != fp; got != c.changes {
			t.Errorf("%s: fingerprint changed = %v, want %v", c.name, got, c.changes)
		}
	}
	a, b := Default(), Default()
	a.Aggregation.DP.NoiseMultiplier, b.Aggregation.DP.NoiseMultiplier = 1, 1
	b.Aggregation.DP.Clip = 2
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("dp.clip does not enter the fingerprint while dp is on")
	}
}

// TestAggregationBounds: the section's documented ranges, as the
// conformance suite reads them.
func TestAggregationBounds(t *testing.T) {
	got := map[string]Bound{}
	for _, b := range Bounds(&Default().Aggregation) {
		got[b.Path] = b
	}
	tr, cn, nm, cl, de := got["trim"], got["clip_norm"], got["dp.noise_multiplier"], got["dp.clip"], got["dp.delta"]
	if len(got) != 5 || tr.Min == nil || *tr.Min != 0 || tr.MinOpen || tr.Max == nil || *tr.Max != 0.5 || !tr.MaxOpen {
		t.Errorf("trim: %+v (all %v)", tr, got)
	}
	if cn.Min == nil || *cn.Min != 0 || cn.Max != nil || nm.Min == nil || *nm.Min != 0 || nm.Max != nil {
		t.Errorf("clip_norm %+v, dp.noise_multiplier %+v", cn, nm)
	}
	if cl.Min == nil || *cl.Min != 0 || !cl.MinOpen || cl.Max != nil {
		t.Errorf("dp.clip: %+v", cl)
	}
	if de.Min == nil || *de.Min != 0 || !de.MinOpen || de.Max == nil || *de.Max != 1 || !de.MaxOpen {
		t.Errorf("dp.delta: %+v", de)
	}
}

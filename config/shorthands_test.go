package config

import (
	"slices"
	"strings"
	"testing"
)

// TestShorthandsSets: serve's shorthand flags become exactly the --set
// overrides of the flags given, in a fixed order, and compose; a bad rule
// or codec is refused naming the flag.
func TestShorthandsSets(t *testing.T) {
	given := func(flags ...string) func(string) bool {
		return func(f string) bool { return slices.Contains(flags, f) }
	}
	r := Shorthands{Aggregate: "trimmed-mean", Trim: 0.2, ClipNorm: 1.5, DPNoise: 1.1, DPClip: 0.5, DPDelta: 1e-6, Secure: true, Compress: "int8"}
	if sets, err := r.Sets(given()); err != nil || len(sets) != 0 {
		t.Fatalf("no flag given: %v, %v; want no override", sets, err)
	}
	sets, err := r.Sets(given("aggregate", "trim", "dp-delta", "compress"))
	want := []string{"aggregation.rule=trimmed_mean", "aggregation.trim=0.2", "aggregation.dp.delta=1e-06", "federation.compress=int8"}
	if err != nil || !slices.Equal(sets, want) {
		t.Fatalf("sets %v, %v; want %v", sets, err, want)
	}
	e, err := Compose(Sources{Sets: sets})
	if err != nil || e.Aggregation.Trim != 0.2 || e.Aggregation.DP.Delta != 1e-6 || e.Federation.Compress != "int8" {
		t.Fatalf("the overrides do not compose: %v", err)
	}
	sets, err = r.Sets(given("clip-norm", "dp-noise-multiplier", "dp-clip", "secure-aggregation"))
	want = []string{"aggregation.clip_norm=1.5", "aggregation.dp.noise_multiplier=1.1", "aggregation.dp.clip=0.5", "federation.secure_aggregation=true"}
	if err != nil || !slices.Equal(sets, want) {
		t.Fatalf("sets %v, %v; want %v", sets, err, want)
	}
	for flag, bad := range map[string]Shorthands{"--aggregate": {Aggregate: "mode"}, "--compress": {Compress: "zip"}} {
		if _, err := bad.Sets(given(strings.TrimPrefix(flag, "--"))); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: error %v, want one naming %s", bad, err, flag)
		}
	}
}

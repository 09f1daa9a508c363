package pfedmma

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
)

// TestConfigValidateBounds: every limit of Config.Validate on both sides of
// its boundary (an encoder of L = 4 blocks), each refusal naming the field.
func TestConfigValidateBounds(t *testing.T) {
	const L = 4
	ok := Config{Start: 2, End: 3, Dim: 4, Scale: 0.005}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // "" when valid
	}{
		{"valid", ok, ""},
		{"start 0 (the embeddings)", with(func(c *Config) { c.Start = 0 }), ""},
		{"start -1", with(func(c *Config) { c.Start = -1 }), "start block -1 outside 0..4"},
		{"start = end = L", with(func(c *Config) { c.Start, c.End = L, L }), ""},
		{"start L+1", with(func(c *Config) { c.Start, c.End = L+1, L+1 }), "start block 5 outside 0..4"},
		{"end = start", with(func(c *Config) { c.End = c.Start }), ""},
		{"end before start", with(func(c *Config) { c.End = c.Start - 1 }), "end block 1 outside 2..4"},
		{"end L", with(func(c *Config) { c.End = L }), ""},
		{"end L+1", with(func(c *Config) { c.End = L + 1 }), "end block 5 outside 2..4"},
		{"dim 1", with(func(c *Config) { c.Dim = 1 }), ""},
		{"dim 0", with(func(c *Config) { c.Dim = 0 }), "adapter dim 0 must be positive"},
		{"smallest scale", with(func(c *Config) { c.Scale = math.SmallestNonzeroFloat32 }), ""},
		{"scale 0", with(func(c *Config) { c.Scale = 0 }), "scale 0 must be positive"},
		{"scale -1", with(func(c *Config) { c.Scale = -1 }), "scale -1 must be positive"},
		{"scale NaN", with(func(c *Config) { c.Scale = float32(math.NaN()) }), "scale NaN must be positive"},
	} {
		err := tc.cfg.Validate(L)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}

// TestSettingsBlocks: Start and End resolved against the model depth by
// hand (negative starts count from the last block, end 0 is the last),
// and every range that does not fit refused.
func TestSettingsBlocks(t *testing.T) {
	for _, tc := range []struct {
		start, end, layers int
		first, last        int
		err                string
	}{
		{10, 0, 12, 10, 12, ""},
		{0, 0, 12, 0, 12, ""},
		{-1, 0, 12, 12, 12, ""},
		{-3, 0, 12, 10, 12, ""},
		{-3, 11, 12, 10, 11, ""},
		{-12, 0, 12, 1, 12, ""},
		{-13, 0, 12, 0, 0, "pfedmma.start -13: the model has only 12 blocks"},
		{1, 1, 1, 1, 1, ""},
		{0, 0, 0, 0, 0, "pfedmma: model has 0 blocks"},
		{2, 12, 12, 2, 12, ""},
		{2, 13, 12, 0, 0, "pfedmma.end 13: the model has blocks 1..12"},
		{5, 5, 12, 5, 5, ""},
		{6, 5, 12, 0, 0, "pfedmma.start 6: first block 6 is after last block 5"},
		{-2, 9, 12, 0, 0, "pfedmma.start -2: first block 11 is after last block 9"},
	} {
		s := Settings{Start: tc.start, End: tc.end}
		first, last, err := s.Blocks(tc.layers)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("start %d end %d of %d blocks: error %v, want %q", tc.start, tc.end, tc.layers, err, tc.err)
			}
			continue
		}
		if err != nil || first != tc.first || last != tc.last {
			t.Errorf("start %d end %d of %d blocks: %d..%d (%v), want %d..%d", tc.start, tc.end, tc.layers, first, last, err, tc.first, tc.last)
		}
	}
}

// TestSettingsCheck: the section's own rule (start after end, when both
// are block numbers) on both sides of its boundary, and the activation.
func TestSettingsCheck(t *testing.T) {
	base := Settings{Start: 3, End: 3, Dim: 8, Scale: 0.005, Activation: "relu"}
	for _, tc := range []struct {
		name string
		mod  func(*Settings)
		err  string
	}{
		{"start = end", func(*Settings) {}, ""},
		{"start after end", func(s *Settings) { s.Start = 4 }, "pfedmma.start"},
		{"end 0 (the last block)", func(s *Settings) { s.End = 0 }, ""},
		{"start 0 (embeddings), end 3", func(s *Settings) { s.Start = 0 }, ""},
		{"negative start before end", func(s *Settings) { s.Start = -1 }, ""},
		{"gelu is a known name", func(s *Settings) { s.Activation = "gelu" }, ""},
		{"unknown activation", func(s *Settings) { s.Activation = "tanh" }, "pfedmma.activation"},
	} {
		s := base
		tc.mod(&s)
		err := config.CheckSection("pfedmma", &s)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.err)
		}
	}
}

// TestSettingsAdapters: relu (or unset) resolves, gelu is refused by name.
func TestSettingsAdapters(t *testing.T) {
	for _, act := range []string{"", "relu"} {
		s := Settings{Start: -2, End: 0, Dim: 8, Scale: 0.25, Activation: act}
		cfg, err := s.Adapters(12)
		if err != nil || cfg != (Config{Start: 11, End: 12, Dim: 8, Scale: 0.25}) {
			t.Errorf("activation %q: %+v, %v", act, cfg, err)
		}
	}
	s := Settings{Start: 1, Dim: 8, Scale: 0.25, Activation: "gelu"}
	if _, err := s.Adapters(12); err == nil || !strings.Contains(err.Error(), `pfedmma.activation "gelu"`) {
		t.Errorf("gelu: %v", err)
	}
}

// TestFitModelShares: a start block beyond the model becomes the same
// share of its last blocks, max(1, round((12−start+1)/12·layers)), by
// hand; an end beyond the model becomes 0; blocks the model has stay.
func TestFitModelShares(t *testing.T) {
	for _, tc := range []struct {
		start, end, layers int
		wantStart, wantEnd int
		changes            int
	}{
		{10, 0, 4, -1, 0, 1},   // 3/12·4 = 1
		{10, 0, 24, 10, 0, 0},  // the model has block 10: kept
		{13, 0, 12, -1, 0, 1},  // max(1, round(0)) = 1
		{25, 0, 24, -1, 0, 1},  // (12−25+1)/12·24 = −24 → 1
		{9, 0, 8, -3, 0, 1},    // 4/12·8 = 2.67 → 3
		{5, 0, 4, -3, 0, 1},    // 8/12·4 = 2.67 → 3
		{4, 4, 4, 4, 4, 0},     // start = end = layers: kept
		{2, 5, 4, 2, 0, 1},     // end beyond the model
		{7, 7, 6, -3, 0, 2},    // 6/12·6 = 3, and the end
		{12, 30, 24, 12, 0, 1}, // only the end
	} {
		s := &Settings{Start: tc.start, End: tc.end}
		changes := s.FitModel(tc.layers)
		if s.Start != tc.wantStart || s.End != tc.wantEnd || len(changes) != tc.changes {
			t.Errorf("start %d end %d on %d blocks: start %d end %d (%q), want %d %d with %d changes",
				tc.start, tc.end, tc.layers, s.Start, s.End, changes, tc.wantStart, tc.wantEnd, tc.changes)
		}
	}
}

// TestCanSplitBounds: split records need 1 ≤ start < layers.
func TestCanSplitBounds(t *testing.T) {
	for _, tc := range []struct {
		start, layers int
		want          bool
	}{{0, 4, false}, {1, 4, true}, {3, 4, true}, {4, 4, false}, {5, 4, false}} {
		if got := CanSplit(tc.start, tc.layers); got != tc.want {
			t.Errorf("CanSplit(%d, %d) = %v, want %v", tc.start, tc.layers, got, tc.want)
		}
	}
}

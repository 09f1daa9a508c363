package conformance

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
)

// edgeValues are the documented ends of a setting's range: the minimum
// (for an open bound such as "positive", 1e-6 above it) and the maximum
// (for an open bound such as "below 0.5", 1e-6 below it).
func edgeValues(b config.Bound) []string {
	var out []string
	format := func(v float64) string {
		if b.Int {
			return strconv.Itoa(int(v))
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	if b.Min != nil {
		v := *b.Min
		if b.MinOpen {
			if b.Int {
				v++
			} else {
				v += 1e-6
			}
		}
		out = append(out, format(v))
	}
	if b.Max != nil && (b.Min == nil || *b.Max != *b.Min) {
		v := *b.Max
		if b.MaxOpen {
			if b.Int {
				v--
			} else {
				v -= 1e-6
			}
		}
		out = append(out, format(v))
	}
	return out
}

// TestSettingEdges: every numeric setting of a method's section at the
// minimum and at the maximum its Check documents either runs a round with
// finite metrics, or is refused — at configuration time, or before any
// round — by an error naming the setting.
func TestSettingEdges(t *testing.T) {
	skipPureGo(t)
	forEach(t, func(t *testing.T, name string) {
		m, err := methods.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		sec := m.DefaultConfig()
		if sec == nil {
			t.Logf("%s has no settings", name)
			return
		}
		bounds := config.Bounds(sec)
		if len(bounds) == 0 {
			t.Logf("%s documents no numeric range", name)
			return
		}
		for _, b := range bounds {
			key := name + "." + b.Path
			for _, v := range edgeValues(b) {
				t.Run(b.Path+"="+v, func(t *testing.T) { runEdge(t, name, key, v) })
			}
		}
	})
}

// TestAggregationEdges: every numeric setting of the aggregation section
// at the ends config.Bounds documents, with the settings that turn it on
// (rule trimmed_mean for trim, dp.noise_multiplier for dp.*), runs a
// round of pFedMMA with finite metrics or is refused naming the key. The
// arithmetic does not depend on the method (TestAggregationRules checks
// every method's rules), so one method runs the edges.
func TestAggregationEdges(t *testing.T) {
	skipPureGo(t)
	e, err := config.Preset("world-compare")
	if err != nil {
		t.Fatal(err)
	}
	bounds := config.Bounds(&e.Aggregation)
	if len(bounds) == 0 {
		t.Fatal("the aggregation section documents no numeric range")
	}
	on := map[string][]string{"trim": {"aggregation.rule=trimmed_mean"}}
	for _, b := range bounds {
		extra := on[b.Path]
		if strings.HasPrefix(b.Path, "dp.") && b.Path != "dp.noise_multiplier" {
			extra = []string{"aggregation.dp.noise_multiplier=1"}
		}
		for _, v := range edgeValues(b) {
			t.Run(b.Path+"="+v, func(t *testing.T) { runEdge(t, "pfedmma", "aggregation."+b.Path, v, extra...) })
		}
	}
}

// runEdge runs one round of a tinier world (two clients, four classes)
// with key=value (and the extra settings).
func runEdge(t *testing.T, name, key, value string, extra ...string) {
	set := key + "=" + value
	e, err := worldConfigN(t, name, 2, append([]string{"dataset.num_classes=4", set}, extra...)...)
	if err != nil {
		if !strings.Contains(err.Error(), strings.TrimPrefix(key, name+".")) {
			t.Fatalf("%s refused at configuration time without naming %s: %v", set, key, err)
		}
		t.Logf("refused: %v", err)
		return
	}
	o := options(t, e, t.TempDir())
	o.Rounds, o.EvalEvery = 1, 1
	rounds := 0
	o.OnRound = func(string, federation.RoundReport) { rounds++ }
	res, err := experiment.Run(context.Background(), o)
	if err != nil {
		if rounds > 0 || !strings.Contains(err.Error(), strings.TrimPrefix(key, name+".")) {
			t.Fatalf("%s failed after %d rounds, or without naming %s: %v", set, rounds, key, err)
		}
		t.Logf("refused before any round: %v", err)
		return
	}
	sum, ok := res.Summary.Get(name)
	if !ok || len(sum) == 0 {
		t.Fatalf("%s: no metrics", set)
	}
	for k, v := range sum {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("%s: %s = %v", set, k, v)
		}
	}
}

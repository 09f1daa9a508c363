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
// (for an open bound such as "positive", 1e-6 above it) and the maximum.
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
		out = append(out, format(*b.Max))
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

// runEdge runs one round of a tinier world (two clients, four classes)
// with key=value.
func runEdge(t *testing.T, name, key, value string) {
	set := key + "=" + value
	e, err := worldConfigN(t, name, 2, "dataset.num_classes=4", set)
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

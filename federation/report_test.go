package federation

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/eval"
)

// TestMeanMetricsHMOfMeans: the round's mean "hm" is the harmonic mean of
// the averaged local, base and novel (as the report and the papers), not
// the mean of the clients' HMs.
func TestMeanMetricsHMOfMeans(t *testing.T) {
	per := map[int]Metrics{
		0: eval.BaseToNovel(90, 80, 40),
		1: eval.BaseToNovel(60, 70, 90),
	}
	m := meanMetrics(per)
	want := eval.HM(75, 75, 65)
	if math.Abs(m["hm"]-want) > 1e-12 {
		t.Fatalf("hm = %v, want HM of the means %v", m["hm"], want)
	}
	meanOfHMs := (per[0]["hm"] + per[1]["hm"]) / 2
	if math.Abs(m["hm"]-meanOfHMs) < 1e-6 {
		t.Fatalf("test data does not tell the two definitions apart (%v)", meanOfHMs)
	}
	if m["local"] != 75 || m["novel"] != 65 {
		t.Fatalf("means %v", m)
	}
	// metrics without hm are left as plain means
	if got := meanMetrics(map[int]Metrics{0: {"acc": 1}, 1: {"acc": 0}}); got["acc"] != 0.5 || len(got) != 1 {
		t.Fatalf("acc mean %v", got)
	}
}

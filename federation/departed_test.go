package federation

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// TestDeparted: a client Departed reports gone (a revoked site) is from
// then on neither asked to train nor to evaluate, is no failure and not
// absent, and RoundReport.Departed names it; when Departed no longer
// reports it (re-keyed), it is asked again.
func TestDeparted(t *testing.T) {
	dir := t.TempDir()
	var proxies []ClientProxy
	for id := range 3 {
		proxies = append(proxies, NewSite(&evalInstall{id: id, w: make([]float32, 2)}, filepath.Join(dir, fmt.Sprint(id))))
	}
	round := 0
	c := &Coordinator{Strategy: &sendW{}, Proxies: proxies, Rounds: 5, Fraction: 1, TolerateFailures: true, EvaluateAlone: true,
		OnRound: func(rep RoundReport) error { round = rep.Round + 1; return nil },
		Departed: func(id int) string {
			if id == 1 && round >= 1 && round <= 2 {
				return "revoked"
			}
			return ""
		}}
	h, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range h.Rounds {
		gone := r.Round >= 1 && r.Round <= 2
		_, evaluated := r.Eval[1]
		switch {
		case gone && (slices.Contains(r.Selected, 1) || evaluated || len(r.Failures) > 0 || len(r.Absent) > 0 || !slices.Equal(r.Departed, []int{1})):
			t.Errorf("round %d, client 1 gone: selected %v, eval %v, failures %v, absent %v, departed %v", r.Round, r.Selected, r.Eval, r.Failures, r.Absent, r.Departed)
		case !gone && (!slices.Contains(r.Selected, 1) || !evaluated || len(r.Departed) > 0):
			t.Errorf("round %d, client 1 present: selected %v, eval %v, departed %v", r.Round, r.Selected, r.Eval, r.Departed)
		}
	}
}

package federation

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
)

// groupClient is an evalInstall whose evaluation its group can run.
type groupClient struct {
	evalInstall
	g *recordingGroup
}

func (c *groupClient) EvalGroup() GroupEval {
	if c.g == nil {
		return nil
	}
	return c.g
}

// recordingGroup evaluates its clients one after the other (as their own
// Evaluate), recording each call's client IDs; fail makes one client fail.
type recordingGroup struct {
	calls [][]int
	fail  int
}

func (g *recordingGroup) EvaluateGroup(ctx context.Context, clients []Client, ins []EvaluateIns) ([]EvaluateRes, []error) {
	var ids []int
	res := make([]EvaluateRes, len(clients))
	errs := make([]error, len(clients))
	for i, c := range clients {
		ids = append(ids, c.ID())
		if c.ID() == g.fail {
			errs[i] = errors.New("refused")
			continue
		}
		res[i], errs[i] = c.Evaluate(ctx, ins[i])
	}
	g.calls = append(g.calls, ids)
	return res, errs
}

// sendW is a strategy that sends every client w = round+10 for its
// evaluation and ignores uploads.
type sendW struct{ round int }

func (s *sendW) Name() string                 { return "sendw" }
func (s *sendW) Init([]ClientInfo) error      { return nil }
func (s *sendW) State() tensor.Named          { return tensor.Named{} }
func (s *sendW) LoadState(tensor.Named) error { return nil }
func (s *sendW) Configure(int, []int) (map[int]tensor.Named, error) {
	return nil, nil
}
func (s *sendW) Aggregate(r int, _ []FitResult, _ []Failure) error { s.round = r; return nil }
func (s *sendW) ConfigureEvaluate(r int, clients []int) (map[int]tensor.Named, error) {
	out := map[int]tensor.Named{}
	for _, id := range clients {
		out[id] = tensor.Named{"w": {Shape: []int{2}, Data: []float32{float32(r + 10), float32(id)}}}
	}
	return out, nil
}

// groupFederation is 3 clients of one group (IDs 0, 1, 3) and one alone
// (ID 2), each a Site with its folder under dir.
func groupFederation(dir string, g *recordingGroup, alone bool) *Coordinator {
	var proxies []ClientProxy
	for id := range 4 {
		var c Client = &groupClient{evalInstall: evalInstall{id: id, w: make([]float32, 2)}, g: g}
		if id == 2 {
			c = &evalInstall{id: id, w: make([]float32, 2)}
		}
		proxies = append(proxies, NewSite(c, filepath.Join(dir, fmt.Sprint(id))))
	}
	return &Coordinator{Strategy: &sendW{}, Proxies: proxies, Rounds: 2, Fraction: 1, EvaluateAlone: alone, TolerateFailures: true}
}

// TestGroupEvaluation: the in-process clients of one group are evaluated
// by one call of their GroupEval per round (in ID order), the others alone;
// the results are those of the clients evaluated alone, a client the group
// fails is absent, and a site keeps the state its group evaluation
// installed.
func TestGroupEvaluation(t *testing.T) {
	ctx := context.Background()
	run := func(g *recordingGroup, alone bool) (*History, string) {
		dir := t.TempDir()
		h, err := groupFederation(dir, g, alone).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h, dir
	}
	g := &recordingGroup{fail: -1}
	together, dir := run(g, false)
	if want := [][]int{{0, 1, 3}, {0, 1, 3}}; fmt.Sprint(g.calls) != fmt.Sprint(want) {
		t.Fatalf("group evaluations %v, want %v", g.calls, want)
	}
	ga := &recordingGroup{fail: -1}
	alone, _ := run(ga, true)
	if len(ga.calls) != 0 {
		t.Fatalf("EvaluateAlone: the group was still called: %v", ga.calls)
	}
	for r := range 2 {
		if got, want := fmt.Sprint(together.Rounds[r].Eval), fmt.Sprint(alone.Rounds[r].Eval); got != want || len(together.Rounds[r].Eval) != 4 {
			t.Errorf("round %d: together %v, alone %v", r, got, want)
		}
	}
	// a restarted site holds what its group evaluation installed
	fresh := &evalInstall{id: 3, w: make([]float32, 2)}
	if err := NewSite(fresh, filepath.Join(dir, "3")).Restore(); err != nil {
		t.Fatal(err)
	}
	if fresh.w[0] != 11 || fresh.w[1] != 3 {
		t.Fatalf("site 3 restarted holds %v, it evaluated [11 3]", fresh.w)
	}
	// a client the group fails is absent, the others are scored
	gf := &recordingGroup{fail: 1}
	failed, _ := run(gf, false)
	last := failed.Rounds[1]
	if _, ok := last.Eval[1]; ok || !slices.Contains(last.Absent, 1) || len(last.Eval) != 3 {
		t.Fatalf("client 1 failed its group evaluation: eval %v, absent %v", last.Eval, last.Absent)
	}
}

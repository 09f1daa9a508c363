package experiment

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
)

func TestLODOFold(t *testing.T) {
	ds := &dataset.Dataset{Name: "d", Domains: []string{"a", "b", "c"}}
	task := &protocol.Task{Dataset: ds, HeldOut: "b", Clients: []protocol.ClientTask{
		{ID: 0, Domain: 0}, {ID: 1, Domain: 0}, {ID: 2, Domain: 2}}}
	rec := report.RoundRecord{Mean: report.Metrics{protocol.GlobalMetric: 40}, Clients: []report.ClientMetrics{
		{ID: 0, Metrics: report.Metrics{"acc": 60}}, {ID: 1, Metrics: report.Metrics{"acc": 80}}, {ID: 2, Metrics: report.Metrics{"acc": 90}}}}
	f := LODOFold(task, rec)
	if f.HeldOut != "b" || f.Global != 40 || f.Personal["a"] != 70 || f.Personal["c"] != 90 || len(f.Personal) != 2 {
		t.Fatalf("fold %+v", f)
	}
	rec.Mean = report.Metrics{}
	if f := LODOFold(task, rec); !math.IsNaN(f.Global) {
		t.Fatalf("no global metric: %g", f.Global)
	}
}

// TestLeaveOneDomainOutFolds runs leave_one_domain_out with no held-out
// domain set: one fold per style, each with its own folder, and the
// matrices and G/P/C of every method. Frozen CLIP's global model is
// zero-shot, so its diagonal must equal its personal accuracy on the same
// domain in the other folds; PromptFL's global prompt must be scored.
func TestLeaveOneDomainOutFolds(t *testing.T) {
	res := runPreset(t, "world-domains", "protocol.name=leave_one_domain_out", "protocol.clients_per_domain=1",
		"federation.clients=3", "federation.rounds=1", "federation.local_epochs=1", "dataset.num_classes=16",
		"methods=[zeroshot,promptfl]")
	zs, ok := res.Summary.Get(ZeroShot)
	pf, ok2 := res.Summary.Get("promptfl")
	if !ok || !ok2 {
		t.Fatalf("summary lacks a method: %+v", res.Summary.Methods)
	}
	t.Logf("zero-shot %v, promptfl %v", zs, pf)
	for _, k := range []string{"G", "P", "C"} {
		if math.IsNaN(pf[k]) || pf[k] <= 0 {
			t.Errorf("promptfl %s = %v", k, pf[k])
		}
	}
	// zero-shot: the same frozen model in every fold
	if math.Abs(zs["G"]-zs["P"]) > 1e-9 || math.Abs(zs["G"]-zs["C"]) > 1e-9 {
		t.Errorf("zero-shot G/P/C differ: %v", zs)
	}
	global := 0
	for _, r := range res.Records {
		if _, ok := r.Mean[protocol.GlobalMetric]; ok {
			global++
		}
	}
	if len(res.Records) != 8 || global != 8 {
		t.Errorf("%d round records (%d with the global metric), want 2 methods × 4 folds", len(res.Records), global)
	}
	if len(res.Table.Rows) != 2 {
		t.Errorf("G/P/C table has %d rows", len(res.Table.Rows))
	}
}

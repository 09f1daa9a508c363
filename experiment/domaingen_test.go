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

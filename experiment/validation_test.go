package experiment

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/protocol"
)

// TestValidationReported: with protocol.validation every method's "val"
// accuracy is in each round's record, the summary, metrics.csv and the
// report's table; without it none of them has a val column.
func TestValidationReported(t *testing.T) {
	model := smallModel(t)
	o := smallOptions(t, model)
	o.Rounds, o.SaveAdapters = 2, false
	o.Protocol.Validation = 0.25
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{ZeroShot, PFedMMA} {
		s, _ := res.Summary.Get(m)
		v, ok := s[protocol.ValidationMetric]
		if !ok || v < 0 || v > 100 {
			t.Fatalf("%s: summary %v has no validation accuracy", m, s)
		}
	}
	for _, r := range res.Records {
		if _, ok := r.Mean[protocol.ValidationMetric]; !ok {
			t.Fatalf("%s round %d: no validation accuracy in %v", r.Method, r.Round, r.Mean)
		}
		for _, c := range r.Clients {
			if _, ok := c.Metrics[protocol.ValidationMetric]; !ok {
				t.Fatalf("%s round %d client %d: no validation accuracy", r.Method, r.Round, c.ID)
			}
		}
	}
	csv, err := os.ReadFile(filepath.Join(o.OutDir, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(o.OutDir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(csv), "mean_val") || !strings.Contains(string(md), "| Val") {
		t.Fatalf("metrics.csv or report.md lacks the validation column:\n%s\n%s", strings.SplitN(string(csv), "\n", 2)[0], md)
	}

	o = smallOptions(t, model)
	o.Rounds, o.SaveAdapters, o.Methods = 1, false, []string{ZeroShot}
	res, err = Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := res.Summary.Get(ZeroShot); s != nil {
		if _, ok := s[protocol.ValidationMetric]; ok {
			t.Fatalf("validation accuracy without protocol.validation: %v", s)
		}
	}
}

package experiment

import (
	"context"
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
)

// TestFLiPProtocolOptions: federation.client_drop_rate and eval.personal
// reach the run from the configuration: each round aggregates ⌊0.7·10⌋ = 7
// of the 10 clients (the rest dropped, by the seed), and the summary and
// the records carry "personal", the freshly trained models' accuracy,
// which is not the aggregated models' Local.
func TestFLiPProtocolOptions(t *testing.T) {
	model, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	e, err := config.Compose(config.Sources{Preset: "world-base2novel",
		Sets: []string{"methods=[promptfl]", "federation.rounds=2", "federation.client_drop_rate=0.3", "eval.personal=true"}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := FromConfig(e, model, e.Seed, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if o.DropRate != 0.3 || !o.PersonalEval || o.Federation().DropRate != 0.3 || !o.Federation().PersonalEval {
		t.Fatalf("options drop %v personal %v; federation %+v", o.DropRate, o.PersonalEval, o.Federation())
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 2 {
		t.Fatalf("%d records, want 2", len(res.Records))
	}
	for _, r := range res.Records {
		if len(r.Participants) != 7 {
			t.Errorf("round %d: participants %v, want 7 of 10", r.Round, r.Participants)
		}
		if p, ok := r.Mean[federation.PersonalMetric]; !ok || !(p > 0 && p <= 100) {
			t.Errorf("round %d: personal %v (%v), want an accuracy", r.Round, p, ok)
		}
	}
	m, _ := res.Summary.Get("promptfl")
	if p, ok := m[federation.PersonalMetric]; !ok || math.IsNaN(p) || p == m["local"] {
		t.Errorf("summary %v: want personal beside (and not equal to) local", m)
	}
}

// TestPersonalOneClientIsLocal: with a single client the server's average
// is the client's own upload, so the model it just trained is the model
// Local scores after the round: "personal" must equal Local exactly (the
// oracle: pfedmma's own Local of the same run).
func TestPersonalOneClientIsLocal(t *testing.T) {
	model, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	e, err := config.Compose(config.Sources{Preset: "world-base2novel",
		Sets: []string{"methods=[promptfl]", "federation.rounds=1", "federation.clients=1", "eval.personal=true"}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := FromConfig(e, model, e.Seed, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := res.Summary.Get("promptfl")
	if p, ok := m[federation.PersonalMetric]; !ok || p != m["local"] || p == m["novel"] {
		t.Errorf("one client: personal %v (%v), local %v, novel %v: want personal = local (not novel)", p, ok, m["local"], m["novel"])
	}
}

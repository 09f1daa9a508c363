package experiment

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
)

// TestResumeKeepsUpdateBytes: a run interrupted after its first round (as
// by SIGINT: its context cancelled) and resumed writes the summary's
// update bytes per round and site an uninterrupted run writes (before:
// only the rounds after the resume were summed and divided by every round,
// 652.8 instead of 1088).
func TestResumeKeepsUpdateBytes(t *testing.T) {
	model := smallModel(t)
	full := smallOptions(t, model)
	full.Methods = []string{PFedMMA}
	want, err := Run(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := want.Summary.Extra["update_bytes_per_round_per_site"].(map[string]float64)[PFedMMA]
	if !(wantBytes > 0) {
		t.Fatalf("uninterrupted run: update bytes %v", wantBytes)
	}

	part := smallOptions(t, model)
	part.Methods = []string{PFedMMA}
	ctx, cancel := context.WithCancel(context.Background())
	part.OnRound = func(_ string, r federation.RoundReport) {
		if r.Round == 0 {
			cancel()
		}
	}
	if _, err := Run(ctx, part); err == nil {
		t.Fatal("the interrupted run did not stop")
	}
	part.OnRound = nil
	part.Resume = true
	got, err := Run(context.Background(), part)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != full.Rounds {
		t.Fatalf("resumed run has %d records, want %d", len(got.Records), full.Rounds)
	}
	gotBytes := got.Summary.Extra["update_bytes_per_round_per_site"].(map[string]float64)[PFedMMA]
	if gotBytes != wantBytes {
		t.Errorf("update bytes per round per site: resumed %v, uninterrupted %v", gotBytes, wantBytes)
	}
}

package coordstore

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
)

func TestCheckpointRoundTripAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(); !errors.Is(err, federation.ErrNoCheckpoint) {
		t.Fatalf("Load of an empty store: %v", err)
	}
	rep := federation.RoundReport{Round: 0, Selected: []int{0, 2}, Fit: map[int]federation.Metrics{0: {"loss": 0.1}, 2: {"loss": math.NaN()}},
		Eval: map[int]federation.Metrics{0: {"acc": 1.0 / 3}}, EvalMean: federation.Metrics{"acc": 1.0 / 3}, BytesUp: 24, Seconds: 0.25}
	ck := &federation.Checkpoint{NextRound: 1, Strategy: "fedavg", Seed: 9, Fraction: 0.5, Sampler: []byte{1, 2, 3},
		History: federation.History{Rounds: []federation.RoundReport{rep}}, Clients: []int{0, 1, 2},
		StrategyState: tensor.Named{"global/w": {Shape: []int{2}, Data: []float32{1.5, float32(math.Pi)}}}}
	if err := s.Save(ck); err != nil {
		t.Fatal(err)
	}
	ck.NextRound = 2
	rep2 := rep
	rep2.Round = 1
	ck.History.Rounds = append(ck.History.Rounds, rep2)
	if err := s.Save(ck); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordUpdate(Update{TaskID: "t1", Round: 1, Site: "a", Kind: "fit", NumExamples: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordUpdate(Update{TaskID: "t1", Round: 1, Site: "a", Kind: "fit"}); !errors.Is(err, ErrReplay) {
		t.Fatalf("second record of a task: %v", err)
	}
	at := time.Now().Round(time.Millisecond)
	if err := s.PutSite(SiteRecord{Name: "a", ClientID: 0, NumExamples: 3, LastContact: at, State: "idle"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	// NaN ≠ NaN: compare through the JSON form the checkpoint uses
	if got.NextRound != 2 || got.Strategy != "fedavg" || got.Seed != 9 || got.Fraction != 0.5 ||
		!reflect.DeepEqual(got.Sampler, ck.Sampler) || !reflect.DeepEqual(got.Clients, ck.Clients) ||
		!reflect.DeepEqual(got.StrategyState, ck.StrategyState) || len(got.History.Rounds) != 2 ||
		got.History.Rounds[1].EvalMean["acc"] != 1.0/3 || !math.IsNaN(got.History.Rounds[0].Fit[2]["loss"]) {
		t.Fatalf("loaded %+v, saved %+v", got, ck)
	}
	rs, err := s.Rounds()
	if err != nil || len(rs) != 2 || rs[1].Round != 1 {
		t.Fatalf("rounds %+v, %v", rs, err)
	}
	if n, _ := s.Updates(1, "fit"); n != 1 {
		t.Fatalf("updates %d", n)
	}
	sites, err := s.Sites()
	if err != nil || len(sites) != 1 || sites[0].NumExamples != 3 || !sites[0].LastContact.Equal(at) {
		t.Fatalf("sites %+v, %v", sites, err)
	}
}

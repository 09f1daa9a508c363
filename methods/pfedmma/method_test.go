package pfedmma

import (
	"strings"
	"testing"
)

func TestFitModel(t *testing.T) {
	s := &Settings{Start: 10, End: 0, Dim: 32, Scale: 0.005, Activation: "relu"}
	changes := s.FitModel(4)
	first, last, err := s.Blocks(4)
	if err != nil || first != 4 || last != 4 || len(changes) != 1 || !strings.Contains(changes[0], "10 → -1") {
		t.Fatalf("FitModel(4): %v → blocks %d..%d, %v", changes, first, last, err)
	}
	s = &Settings{Start: 5, End: 0}
	s.FitModel(12)
	if s.Start != 5 {
		t.Errorf("a start block the model has changed: %d", s.Start)
	}
}

package promptfl

import (
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// TestRoundProductionPath runs the promptfl fixture round through the same
// code as `pfedmma run` and `pfedmma round`: the registered method's
// clients in federation Sites, FedAvg and the Coordinator.
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "promptfl/init.safetensors", []string{"promptfl/round.safetensors"}, nil, "promptfl/round.safetensors", 1e-4)
	if len(out) != 3 {
		t.Errorf("round produced %d tensors, want 2 clients + global", len(out))
	}
}

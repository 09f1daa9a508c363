package promptsrc

import (
	"context"
	"fmt"
	"testing"

	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// TestRoundProductionPath runs testdata/promptsrc/round through the same
// code as `pfedmma run` and `pfedmma round` (the client, the Coordinator):
// two clients (8 and 4 images) train every prompt for one epoch with the
// self-regulating loss, the server averages every prompt (8/12, 4/12), and
// each client starts the next round from the average.
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "promptsrc/init.safetensors", []string{"promptsrc/round.safetensors"}, nil, "promptsrc/round.safetensors", 1e-4)
	ref, _ := paritytest.Read(t, dir+"round.safetensors")
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	for i := range 2 {
		name := fmt.Sprintf("client%d.batch_losses", i)
		paritytest.Rel(t, name, out[name], ref[name], 1e-5)
		for p := range init {
			next, global := fmt.Sprintf("client%d.next.%s", i, p), "global."+p
			paritytest.Rel(t, next, out[next], ref[global], 1e-4)
		}
	}
}

// TestGPAProductionPath runs the round fixture's client 0 (the 8 images of
// testdata/promptsrc/gpa, stored order, batch 4, lr 0.01) for the gpa
// fixture's 3 local epochs with GPA μ 2, σ 1 through the production client:
// its batch losses are the gpa run's, and what it uploads is the
// aggregated model gpa.<p>, not the last epoch's state.
func TestGPAProductionPath(t *testing.T) {
	m := paritytest.Model(t)
	g, _ := paritytest.Read(t, dir+"gpa.safetensors")
	r, _ := paritytest.Read(t, dir+"round.safetensors")
	paritytest.Rel(t, "client0.images = gpa images", r["client0.images"], g["images"], 0)
	sets := []string{"local_epochs=3", "gpa_mean=2", "gpa_std=1"}
	f, err := parity.Load(m, dir+"init.safetensors", []string{dir + "round.safetensors"}, sets)
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	paritytest.Rel(t, "client0.batch_losses", out["client0.batch_losses"], g["batch_losses"], 1e-5)
	for p := range init {
		got := out["client0.trained."+p]
		paritytest.Rel(t, "client0.trained."+p, got, g["gpa."+p], 1e-4)
		paritytest.Rel(t, "update "+p, paritytest.Update(got, init[p]), paritytest.Update(g["gpa."+p], init[p]), updateTol(g["gpa."+p], init[p], 1e-4))
	}
}

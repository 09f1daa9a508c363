package promptsrc

import (
	"fmt"
	"testing"

	"github.com/pfedmma/pfedmma/methods/fixturetest"
)

// TestRoundProductionPath runs testdata/promptsrc/round through the same
// code as `pfedmma run` and `pfedmma round` (the client, the Coordinator):
// two clients (8 and 4 images) train every prompt for one epoch with the
// self-regulating loss, the server averages every prompt (8/12, 4/12), and
// each client starts the next round from the average.
func TestRoundProductionPath(t *testing.T) {
	out := fixturetest.Round(t, Method{}, "promptsrc/init.safetensors", []string{"promptsrc/round.safetensors"}, nil, "promptsrc/round.safetensors", 1e-4)
	ref, _ := fixturetest.Read(t, dir+"round.safetensors")
	init, _ := fixturetest.Read(t, dir+"init.safetensors")
	for i := range 2 {
		name := fmt.Sprintf("client%d.batch_losses", i)
		fixturetest.Rel(t, name, out[name], ref[name], 1e-5)
		for p := range init {
			next, global := fmt.Sprintf("client%d.next.%s", i, p), "global."+p
			fixturetest.Rel(t, next, out[next], ref[global], 1e-4)
		}
	}
}

package fedotp

import (
	"testing"

	"github.com/pfedmma/pfedmma/methods/fixturetest"
)

// TestRoundProductionPath runs the fedotp fixture round through the same
// code as `pfedmma run` and `pfedmma round`: clients upload prompt 0, the
// server averages it, the local prompt stays.
func TestRoundProductionPath(t *testing.T) {
	out := fixturetest.Round(t, Method{}, "fedotp/init.safetensors", []string{"fedotp/round.safetensors"}, nil, "fedotp/round.safetensors", 1e-4)
	if g := out["global."+ParamCtx]; g == nil || g.Shape[0] != 1 {
		t.Errorf("global context %v, want one averaged prompt", g)
	}
}

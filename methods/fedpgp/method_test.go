package fedpgp

import (
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// TestRoundProductionPath runs the fedpgp fixture round through the same
// code as `pfedmma run` and `pfedmma round`: only sigma is averaged, U and V
// stay on the clients.
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "fedpgp/init.safetensors", []string{"fedpgp/round.safetensors"}, nil, "fedpgp/round.safetensors", 1e-4)
	if _, ok := out["global."+ParamU]; ok {
		t.Error("the server holds U")
	}
	if _, ok := out["global."+ParamSigma]; !ok {
		t.Error("the server holds no sigma")
	}
}

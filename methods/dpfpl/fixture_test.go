package dpfpl

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestStepFixtures replays testdata/dpfpl/step.safetensors (ε 0.4, every
// clip active, the authors' recorded Ω and noise) and step_nodp (no
// mechanism) and compares every tensor the fixture holds — forward,
// factors, the gradients after the mechanism, one SGD step — with the
// fixtures' tolerances (forward 1e-5, gradients and parameters 1e-4,
// scale-relative), and the step's update p − init.
func TestStepFixtures(t *testing.T) {
	m := paritytest.Model(t)
	init, _, err := prompt.ReadFile(paritytest.Testdata + "dpfpl/init.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"step", "step_nodp"} {
		t.Run(name, func(t *testing.T) {
			want, meta, err := prompt.ReadFile(paritytest.Testdata + "dpfpl/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			got, err := StepFromFile(m, init, want, meta)
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for k, w := range want {
				if k == "images" || k == "labels" || k == "tokens" || strings.HasSuffix(k, ".omega") || strings.HasSuffix(k, ".noise_u") || strings.HasSuffix(k, ".noise_v") {
					continue
				}
				g, ok := got[k]
				if !ok {
					t.Errorf("%s: not produced", k)
					continue
				}
				tol := 1e-5
				if strings.HasPrefix(k, "grad.") || strings.HasPrefix(k, "step1.") || k == "raw_grad" {
					tol = 1e-4
				}
				paritytest.Close(t, k, g.Data, w.Data, tol)
				checked++
				if p, ok := strings.CutPrefix(k, "step1."); ok {
					paritytest.Close(t, k+" (update)", sub(g, init[p]), sub(w, init[p]), 1e-4)
				}
			}
			if checked < 15 {
				t.Errorf("only %d tensors compared", checked)
			}
		})
	}
}

func sub(a, b *tensor.Tensor) []float32 {
	out := make([]float32, len(a.Data))
	for i := range out {
		out[i] = a.Data[i] - b.Data[i]
	}
	return out
}

// TestRoundFixture runs the fixture round through the production path
// (clients, server, coordinator): each client's local context, and the
// server's global context (the uniform mean of the clients' steps minus
// lr·server_noise), against the authors' per-batch round.
func TestRoundFixture(t *testing.T) {
	out := paritytest.Round(t, Method{}, "dpfpl/init.safetensors", []string{"dpfpl/round.safetensors"}, nil, "dpfpl/round.safetensors", 1e-4)
	if _, ok := out["global."+ParamLocal]; ok {
		t.Error("the server holds a local context")
	}
}

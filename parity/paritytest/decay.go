package paritytest

import (
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// Stepper is a method's one reference step on fixture files: the tiny
// CLIP, the initial parameters, the step file's batch and its metadata.
type Stepper func(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error)

// WeightDecay checks a method's weight decay on its own (the fixtures
// barely see it): step on the init and step files of dir with metadata
// weight_decay 0.5 differs from the step with 0 by −lr·0.5·p in each
// parameter of names (0.5 is large, so that the decay dominates float
// rounding).
func WeightDecay(t *testing.T, dir string, step Stepper, names ...string) {
	t.Helper()
	m := Model(t)
	init, _ := Read(t, dir+"init.safetensors")
	ref, meta := Read(t, dir+"step.safetensors")
	lr, _ := prompt.MetaFloat(meta, "lr")
	with := func(wd string) tensor.Named {
		mm := map[string]string{}
		for k, v := range meta {
			mm[k] = v
		}
		mm["weight_decay"] = wd
		o, err := step(m, init, ref, mm)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	a, b := with("0"), with("0.5")
	for _, name := range names {
		p := init[name].Data
		want := make([]float32, len(p))
		for i := range want {
			want[i] = float32(-lr * 0.5 * float64(p[i]))
		}
		RelValues(t, name+" weight decay", UpdateValues(b["step1."+name].Data, a["step1."+name].Data), want, 1e-3)
	}
}

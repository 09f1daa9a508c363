package maple

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// updateTol is the tolerance of an update p − init compared relative to its
// largest entry: 1e-4, or more where the stored float32 p itself carries
// rounding (half an ulp of max|p| from each of the two values compared)
// that is larger than that relative to a small update.
func updateTol(p, init *tensor.Tensor, base float64) float64 {
	var pm, um float64
	for i, v := range p.Data {
		pm = math.Max(pm, math.Abs(float64(v)))
		um = math.Max(um, math.Abs(float64(v-init.Data[i])))
	}
	ulp := math.Nextafter32(float32(pm), float32(math.Inf(1))) - float32(pm)
	return math.Max(base, 4*float64(ulp)/um)
}

// TestStepFixture reproduces step (J 3 of 4 blocks) and step_j4 (every
// block prompted: the pooled last block's input carries replaced rows).
func TestStepFixture(t *testing.T) {
	m := paritytest.Model(t)
	for _, c := range []struct{ init, step string }{{"init", "step"}, {"init_j4", "step_j4"}} {
		t.Run(c.step, func(t *testing.T) {
			init, _ := paritytest.Read(t, "../../testdata/maple/"+c.init+".safetensors")
			ref, meta := paritytest.Read(t, "../../testdata/maple/"+c.step+".safetensors")
			out, err := StepFromFile(m, init, ref, meta)
			if err != nil {
				t.Fatal(err)
			}
			J, _ := prompt.MetaInt(meta, "prompt_depth")
			if J < 2 {
				t.Fatalf("fixture prompt_depth %d: want deep prompts", J)
			}
			for k := 0; k < J; k++ {
				name := "visual_prompt." + string(rune('0'+k))
				paritytest.Rel(t, name, out[name], ref[name], 1e-5)
			}
			for _, name := range []string{"image_features", "text_features", "logits", "loss"} {
				paritytest.Rel(t, name, out[name], ref[name], 1e-5)
			}
			n := 0
			for name := range init {
				n++
				paritytest.Rel(t, "grad."+name, out["grad."+name], ref["grad."+name], 1e-4)
				paritytest.Rel(t, "step1."+name, out["step1."+name], ref["step1."+name], 1e-5)
				paritytest.Rel(t, "update "+name, paritytest.Update(out["step1."+name], init[name]), paritytest.Update(ref["step1."+name], init[name]),
					updateTol(ref["step1."+name], init[name], 1e-4))
			}
			if n != 3+3*(J-1) {
				t.Errorf("init holds %d tensors, want %d for depth %d", n, 3+3*(J-1), J)
			}
		})
	}
}

func TestRoundFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/maple/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/maple/round.safetensors")
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for name, want := range ref {
		switch {
		case strings.HasSuffix(name, "batch_losses"):
			paritytest.Rel(t, name, out[name], want, 1e-5)
		case strings.Contains(name, ".trained."), strings.HasPrefix(name, "global."):
			p := name[strings.Index(name, "prompt_learner."):]
			paritytest.Rel(t, name, out[name], want, 1e-4)
			paritytest.Rel(t, "update "+name, paritytest.Update(out[name], init[p]), paritytest.Update(want, init[p]), updateTol(want, init[p], 1e-4))
		default:
			continue
		}
		checked++
	}
	if checked < 3*len(init) {
		t.Errorf("checked %d tensors, want at least %d", checked, 3*len(init))
	}
}

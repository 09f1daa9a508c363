package fedotp

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestPositionFixtures: the class-token position fixtures
// (testdata/coop-positions/fedotp-{middle,front}, from the authors'
// trainers/GLP_OT.py with its middle/front branches run over all N·n_cls
// rows): one step and one round, values and updates, and the production
// round (`pfedmma round`). Read as "end", the same step differs.
func TestPositionFixtures(t *testing.T) {
	m := paritytest.Model(t)
	for _, pos := range []string{"middle", "front"} {
		t.Run(pos, func(t *testing.T) {
			dir := "../../testdata/coop-positions/fedotp-" + pos + "/"
			init, _ := paritytest.Read(t, dir+"init.safetensors")
			ref, meta := paritytest.Read(t, dir+"step.safetensors")
			if meta["class_token_position"] != pos {
				t.Fatalf("fixture metadata class_token_position %q", meta["class_token_position"])
			}
			batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "images": ref["images"]}
			out, err := StepFromFile(m, init, batch, meta)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"image_features", "text_features", "logits", "loss", "grad." + ParamCtx, "step1." + ParamCtx} {
				paritytest.Rel(t, name, out[name], ref[name], tolFor(name))
			}
			paritytest.Rel(t, "update", paritytest.Update(out["step1."+ParamCtx], init[ParamCtx]), paritytest.Update(ref["step1."+ParamCtx], init[ParamCtx]), 1e-4)

			endMeta := map[string]string{}
			for k, v := range meta {
				endMeta[k] = v
			}
			endMeta["class_token_position"] = "end"
			end, err := StepFromFile(m, init, batch, endMeta)
			if err != nil {
				t.Fatal(err)
			}
			if d := end["loss"].Data[0] - ref["loss"].Data[0]; d > -1e-3 && d < 1e-3 {
				t.Errorf("the end position gives the same loss %g as %s", end["loss"].Data[0], pos)
			}

			rd, rmeta := paritytest.Read(t, dir+"round.safetensors")
			rb := tensor.Named{}
			for name, v := range rd {
				if name == "tokens" || strings.HasSuffix(name, ".images") || strings.HasSuffix(name, ".labels") {
					rb[name] = v
				}
			}
			rout, err := RoundFromFile(m, init, rb, rmeta)
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for name, want := range rd {
				if _, in := rb[name]; in {
					continue
				}
				paritytest.Rel(t, name, rout[name], want, tolFor(name))
				if strings.HasSuffix(name, ParamCtx) {
					base := init[ParamCtx]
					if strings.HasPrefix(name, "global.") {
						p, _ := GlobalPart(init, 1)
						base = p[ParamCtx]
					}
					paritytest.Rel(t, name+" update", paritytest.Update(rout[name], base), paritytest.Update(want, base), 1e-4)
					checked++
				}
			}
			if checked < 5 {
				t.Errorf("only %d round parameters compared", checked)
			}
			paritytest.Round(t, Method{}, "coop-positions/fedotp-"+pos+"/init.safetensors",
				[]string{"coop-positions/fedotp-" + pos + "/round.safetensors"}, nil, "coop-positions/fedotp-"+pos+"/round.safetensors", 1e-4)
		})
	}
}

// TestPositionStepGradient: the whole step's gradient with respect to both
// prompts by finite differences (the plan held fixed), with the class
// token in the middle and in front.
func TestPositionStepGradient(t *testing.T) {
	for _, pos := range []string{"middle", "front"} {
		t.Run(pos, func(t *testing.T) {
			checkStepGradient(t, "../../testdata/coop-positions/fedotp-"+pos+"/step.safetensors")
		})
	}
}

package promptfl

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// The class-token position fixtures (testdata/coop-positions, from the
// authors' trainers/coop.py): one step and one round for "middle", "front"
// and "middle" with class-specific contexts, values and updates.
func TestPositionFixtures(t *testing.T) {
	m := paritytest.Model(t)
	for _, pos := range []string{"middle", "front", "middle-csc"} {
		t.Run(pos, func(t *testing.T) {
			dir := "../../testdata/coop-positions/" + pos + "/"
			init, _ := paritytest.Read(t, dir+"init.safetensors")
			ref, meta := paritytest.Read(t, dir+"step.safetensors")
			if meta["class_token_position"] != strings.TrimSuffix(pos, "-csc") {
				t.Fatalf("fixture metadata class_token_position %q", meta["class_token_position"])
			}
			out, err := StepFromFile(m, init, ref, meta)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"text_features", "logits", "loss", "grad." + ParamCtx, "step1." + ParamCtx} {
				paritytest.Rel(t, name, out[name], ref[name], paritytest.Tol(name))
			}
			paritytest.Rel(t, "update", paritytest.Update(out["step1."+ParamCtx], init[ParamCtx]), paritytest.Update(ref["step1."+ParamCtx], init[ParamCtx]), 1e-4)
			// the position matters: read as "end" the step differs
			endMeta := map[string]string{}
			for k, v := range meta {
				endMeta[k] = v
			}
			endMeta["class_token_position"] = "end"
			end, err := StepFromFile(m, init, ref, endMeta)
			if err != nil {
				t.Fatal(err)
			}
			if d := end["loss"].Data[0] - ref["loss"].Data[0]; d > -1e-4 && d < 1e-4 {
				t.Errorf("the end position gives the same loss %g as %s", end["loss"].Data[0], pos)
			}

			rd, rmeta := paritytest.Read(t, dir+"round.safetensors")
			rout, err := RoundFromFile(m, init, rd, rmeta)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"client0.batch_losses", "client1.batch_losses", "client0.trained." + ParamCtx, "client1.trained." + ParamCtx, "global." + ParamCtx} {
				paritytest.Rel(t, name, rout[name], rd[name], paritytest.Tol(name))
				if strings.Contains(name, ParamCtx) {
					paritytest.Rel(t, name+" update", paritytest.Update(rout[name], init[ParamCtx]), paritytest.Update(rd[name], init[ParamCtx]), 1e-4)
				}
			}
			// the production path (`pfedmma round`)
			paritytest.Round(t, Method{}, "coop-positions/"+pos+"/init.safetensors", []string{"coop-positions/" + pos + "/round.safetensors"}, nil, "coop-positions/"+pos+"/round.safetensors", 1e-4)
		})
	}
}

func TestPositionSetting(t *testing.T) {
	e := config.Default()
	e.Methods = []string{"promptfl"}
	if err := e.Set("promptfl.class_token_position", "back"); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "promptfl.class_token_position") {
		t.Errorf("class_token_position back: error %v", err)
	}
	if err := (Config{NCtx: 4, Position: "side"}).Validate(); err == nil || !strings.Contains(err.Error(), "class_token_position") {
		t.Errorf("Position side: error %v", err)
	}
}

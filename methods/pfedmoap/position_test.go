package pfedmoap

import (
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"

	"github.com/pfedmma/pfedmma/tensor"
)

// TestPositionFixtures: the class-token position fixtures
// (testdata/coop-positions/pfedmoap-{middle,front}, from the authors'
// trainers/pfedmoap.py unchanged: the local and the expert prompts both
// take the position): one step and one round (the server side as
// testdata/pfedmoap/round), values and updates. Read as "end", the same
// step differs. The round runs through the replay and the production path.
func TestPositionFixtures(t *testing.T) {
	for _, pos := range []string{"middle", "front"} {
		t.Run(pos, func(t *testing.T) {
			dir := "../../testdata/coop-positions/pfedmoap-" + pos + "/"
			ref, meta := paritytest.Read(t, dir+"step.safetensors")
			if meta["class_token_position"] != pos {
				t.Fatalf("fixture metadata class_token_position %q", meta["class_token_position"])
			}
			checkStepFixture(t, dir)
			checkRoundFixture(t, dir)
			checkRoundProduction(t, "coop-positions/pfedmoap-"+pos+"/")

			init, _ := paritytest.Read(t, dir+"init.safetensors")
			endMeta := map[string]string{}
			for k, v := range meta {
				endMeta[k] = v
			}
			endMeta["class_token_position"] = "end"
			batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "images": ref["images"]}
			end, err := StepFromFile(paritytest.Model(t), init, batch, endMeta)
			if err != nil {
				t.Fatal(err)
			}
			if d := end["loss"].Data[0] - ref["loss"].Data[0]; d > -1e-3 && d < 1e-3 {
				t.Errorf("the end position gives the same loss %g as %s", end["loss"].Data[0], pos)
			}
			if d := end["nonlocal_text_features"].Data[0] - ref["nonlocal_text_features"].Data[0]; d > -1e-4 && d < 1e-4 {
				t.Errorf("the end position gives the same expert features as %s", pos)
			}
		})
	}
}

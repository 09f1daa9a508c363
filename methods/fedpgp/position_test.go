package fedpgp

import (
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// TestPositionFixtures: the class-token position fixtures
// (testdata/coop-positions/fedpgp-{middle,front}, from the authors'
// trainers/fedpgp.py with its middle/front branches applied to sigma and
// U·V too): one step and one round, values and updates, and the production
// round (`pfedmma round`). Read as "end", the same step differs.
func TestPositionFixtures(t *testing.T) {
	for _, pos := range []string{"middle", "front"} {
		t.Run(pos, func(t *testing.T) {
			dir := "../../testdata/coop-positions/fedpgp-" + pos + "/"
			ref, meta := paritytest.Read(t, dir+"step.safetensors")
			if meta["class_token_position"] != pos {
				t.Fatalf("fixture metadata class_token_position %q", meta["class_token_position"])
			}
			checkStep(t, dir+"init.safetensors", dir+"step.safetensors")

			init, _ := paritytest.Read(t, dir+"init.safetensors")
			endMeta := map[string]string{}
			for k, v := range meta {
				endMeta[k] = v
			}
			endMeta["class_token_position"] = "end"
			end, err := StepFromFile(paritytest.Model(t), init, stepInputs(ref), endMeta)
			if err != nil {
				t.Fatal(err)
			}
			if d := end["loss"].Data[0] - ref["loss"].Data[0]; d > -1e-3 && d < 1e-3 {
				t.Errorf("the end position gives the same loss %g as %s", end["loss"].Data[0], pos)
			}

			checkRound(t, dir+"init.safetensors", dir+"round.safetensors")
			paritytest.Round(t, Method{}, "coop-positions/fedpgp-"+pos+"/init.safetensors",
				[]string{"coop-positions/fedpgp-" + pos + "/round.safetensors"}, nil, "coop-positions/fedpgp-"+pos+"/round.safetensors", 1e-4)
		})
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestStepRefusals: `step` and `round` refuse, naming the cause, a ViT
// method on a ResNet CLIP (before: "pfedmma: model has 0 blocks") and a
// local_epochs they could not finish, from --set (before: ran until
// killed).
func TestStepRefusals(t *testing.T) {
	const td = "../../testdata/"
	out := filepath.Join(t.TempDir(), "out.safetensors")
	params, step, round := td+"mma-l2/adapters_init.safetensors", td+"mma-l2/step.safetensors", td+"mma-l2/round.safetensors"
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"step", "--method", "pfedmma", "--model", td + "clip-rn-tiny/openai.safetensors", "--params", params, "--batch", step, "--out", out},
			[]string{"pfedmma needs a ViT", "ResNet", "clip_adapter"}},
		{[]string{"round", "--method", "pfedmma", "--model", td + "clip-rn-tiny/openai.safetensors", "--params", params, "--batch", round, "--out", out},
			[]string{"pfedmma needs a ViT", "ResNet"}},
		{[]string{"round", "--method", "pfedmma", "--model", td + "clip-tiny/openai.safetensors", "--params", params, "--batch", round,
			"--set", "local_epochs=1000000000", "--out", out},
			[]string{"local_epochs=1000000000", "--set", "1 to 10000"}},
	} {
		_, err := execute(t, c.args...)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.args[0], err, w)
			}
		}
		if strings.Contains(err.Error(), "0 blocks") {
			t.Errorf("error %q", err)
		}
	}
}

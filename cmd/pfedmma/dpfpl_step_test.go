package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDPFPLStepRoundCommands runs `pfedmma step` and `pfedmma round` for
// dpfpl on the files of testdata/dpfpl (with and without the privacy
// mechanism; the round through the production clients, server and
// coordinator, replaying the authors' recorded draws) and compares every
// output the reference holds with the fixtures README's tolerances
// (forward 1e-5, gradients and parameters 1e-4, scale-relative) and the
// parameters' updates p − init.
func TestDPFPLStepRoundCommands(t *testing.T) {
	checkFixtureCommands(t, "dpfpl", []fixtureCommand{
		{"step", "init", "step"}, {"step", "init", "step_nodp"}, {"round", "init", "round"},
	}, 3, 2)
}

// TestDPFPLRefusesOtherFactorizations: `pfedmma step` and `pfedmma round`
// refuse the authors' factorizations pfedmma does not implement (dplora,
// given either as the fixture key or as the run configuration's
// dpfpl.factorization) with an error naming the key and the value, and
// write nothing.
func TestDPFPLRefusesOtherFactorizations(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	td := "../../testdata/dpfpl/"
	for _, c := range []struct{ kind, batch, set string }{
		{"step", "step", "factorization=dplora"},
		{"round", "round", "dpfpl.factorization=dplora"},
	} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		rootCmd.SetOut(&bytes.Buffer{})
		rootCmd.SetErr(&bytes.Buffer{})
		rootCmd.SetArgs([]string{c.kind, "--method", "dpfpl", "--model", "../../testdata/clip-tiny/openai.safetensors",
			"--params", td + "init.safetensors", "--batch", td + c.batch + ".safetensors", "--set", c.set, "--out", out})
		resetCommand(t, c.kind)
		err := rootCmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "factorization") || !strings.Contains(err.Error(), "dplora") {
			t.Errorf("%s --set %s: %v, want an error naming factorization and dplora", c.kind, c.set, err)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("%s --set %s wrote %s", c.kind, c.set, out)
		}
	}
}

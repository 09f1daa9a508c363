package main

import "testing"

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

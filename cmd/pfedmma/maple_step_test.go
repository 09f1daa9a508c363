package main

import "testing"

// TestMaPLeStepRoundCommands runs `pfedmma step` and `pfedmma round` for
// maple on the files of testdata/maple (the round through the production
// clients, server and coordinator) and compares every output the
// reference holds with the fixtures README's tolerances (forward 1e-5,
// gradients and parameters 1e-4, scale-relative) and the parameters'
// updates p − init (1e-4 of the largest update plus one float32 spacing of
// max|p| per SGD step).
func TestMaPLeStepRoundCommands(t *testing.T) {
	checkFixtureCommands(t, "maple", []fixtureCommand{
		{"step", "init", "step"}, {"step", "init_j4", "step_j4"}, {"round", "init", "round"},
	}, 25, 9)
}

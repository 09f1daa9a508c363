package main

import "testing"

// TestFedMVPStepRoundCommands runs `pfedmma step` and `pfedmma round` for
// fedmvp on the files of testdata/fedmvp (the authors' code on clip-tiny:
// the step before the LoRA switch, the step after it, and a round of two
// clients through the production clients, server and coordinator) and
// compares every output the reference holds with the fixtures README's
// tolerances and the parameters' updates p − init.
func TestFedMVPStepRoundCommands(t *testing.T) {
	checkFixtureCommands(t, "fedmvp", []fixtureCommand{
		{"step", "init", "step"}, {"step", "init_lora", "step_lora"}, {"round", "init", "round"},
	}, 20, 8)
}

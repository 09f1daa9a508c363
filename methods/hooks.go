package methods

import (
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
)

// The optional hooks: interfaces a Method (or the client or config section
// it builds) may implement beyond the Method contract, each with who calls
// it and when. Those that take a fixture live in package parity, and the
// one a config section implements lives in config, to avoid import cycles:
//
//   - [TaskChecker] (Method): experiment, before any work starts.
//   - [SmallRun] (Method): the conformance suite, when it builds its tiny
//     world.
//   - [SurrogateGradient] (a Stepper): the conformance suite's step check,
//     instead of finite differences.
//   - [BatchScorer] (a client): fixture.LearnerStep, for the "logits" of a
//     step.
//   - config.ModelFitter (a method's config section): config's
//     Experiment.FitModel, when `--model` picks a model shallower than the
//     section's settings assume, and bench before it builds a method.
//   - fixture.Stepper (Method): `pfedmma step` and the conformance suite's
//     step check, on a reference step fixture.
//   - fixture.Settings (Method): fixture.RunRound (the plain round of
//     `pfedmma round`), to read the method's settings from the fixture's
//     metadata.
//   - fixture.Rounder (Method): fixture.RunRound, instead of the plain
//     round, when the method's reference round is not one plain FedAvg
//     round (pFedMoAP's expert selection).
//   - [Frozen] (Method): experiment (evaluate once, keep no site files,
//     skip beside the trained method over the network) and `pfedmma
//     predict` (rebuild from the model alone).
//   - [Benchmarked] (Method): bench, before it builds the method for
//     `pfedmma bench method`.

// TaskChecker is a method with settings that depend on the federation
// (pFedMoAP's number of experts against the number of clients): the runner
// (experiment's Run and PrepareFederated) calls it with the method's
// section and the number of clients before any work starts.
type TaskChecker interface {
	CheckTask(sec config.Section, clients int) error
}

// SmallRun is a method whose default settings do not fit a small run —
// the conformance suite's tiny world (the embedded CLIP, whose prompts are
// 24 tokens long, a few clients and classes): SmallSettings returns the
// overrides for a run with that many clients, keyed by setting name within
// the method's section ({"n_ctx": "8"}). A method whose defaults fit needs
// none. The conformance suite calls it when it builds its world.
type SmallRun interface {
	SmallSettings(clients int) map[string]string
}

// SurrogateGradient is a fixture.Stepper whose gradient is, by its
// reference's design, not the gradient of the loss it reports (FedOTP holds
// the optimal-transport plan constant in the backward pass): the conformance
// suite checks its step without finite differences, which the method's own
// tests run with the held part fixed. The string says what is held.
type SurrogateGradient interface {
	SurrogateGradient() string
}

// BatchScorer is a client that can score with its current parameters;
// fixture.LearnerStep calls it for the "logits" of the batch before the
// update.
type BatchScorer interface {
	Scorer() (eval.Scorer, error)
}

// The optional declarations below let the code around the seam (the
// experiment runner, `pfedmma predict`, the benchmarks) ask a method what it
// needs to know instead of switching on the method's name. A method that
// implements none of them is a trained method whose defaults fit every
// caller.

// Frozen is a method that trains nothing (zero-shot CLIP). A run evaluates
// it once; it keeps no per-site files, so `pfedmma predict` rebuilds it from
// the model alone; and a federation over the network, which runs one
// trained method, ignores it beside that method.
type Frozen interface {
	// Frozen reports whether the method trains nothing.
	Frozen() bool
}

// Trains reports whether m trains: it does unless it declares itself
// Frozen.
func Trains(m Method) bool {
	f, ok := m.(Frozen)
	return !ok || !f.Frozen()
}

// Benchmarked is a method whose default settings do not fit the engine
// benchmark of one method (`pfedmma bench method`): two clients holding the
// same batch of random images, client 1 taking part in round 0 only, over
// class prompts of 16 placeholder tokens. BenchSettings adjusts sec, the
// method's DefaultConfig, for it (pFedMoAP takes two experts so that client
// 1 is client 0's expert).
type Benchmarked interface {
	BenchSettings(sec config.Section)
}

package methods

import "github.com/pfedmma/pfedmma/config"

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

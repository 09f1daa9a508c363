package methods

import (
	"testing"

	"github.com/pfedmma/pfedmma/methods/train"
)

// TestForMethodOwnCaches: a method's env (ForMethod) has the training
// options it was given and its own shared workspaces: what its clients
// store there is not in the frozen env, nor in another method's env.
func TestForMethodOwnCaches(t *testing.T) {
	frozen := &Env{Seed: 3, Train: train.Options{LR: 0.1}}
	made := 0
	mk := func() any { made++; return &made }
	first := frozen.Shared("ws", mk)
	a := frozen.ForMethod(train.Options{LR: 0.2, DropLast: true})
	if a == frozen || a.Seed != 3 || a.Train.LR != 0.2 || !a.Train.DropLast || frozen.Train.LR != 0.1 || frozen.Train.DropLast {
		t.Fatalf("ForMethod: %+v from %+v; want a copy with the new options, the frozen env's unchanged", a.Train, frozen.Train)
	}
	a.Shared("ws", mk)
	a.Shared("mine", mk)
	if made != 3 {
		t.Errorf("the method's env reused the frozen env's workspace (made %d, want 3)", made)
	}
	if _, ok := frozen.shared["mine"]; ok || len(frozen.shared) != 1 || frozen.Shared("ws", mk) != first {
		t.Errorf("a workspace the method's env made is in the frozen env (%v)", frozen.shared)
	}
	if b := frozen.ForMethod(frozen.Train); b.shared != nil {
		t.Errorf("a second method's env starts with workspaces %v, want none", b.shared)
	}
}

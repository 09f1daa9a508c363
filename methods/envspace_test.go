package methods_test

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
)

// TestSpaceIndexRefused: a label-space index the task does not have is an
// error naming it, not a panic.
func TestSpaceIndexRefused(t *testing.T) {
	env := &methods.Env{Task: &protocol.Task{Spaces: []protocol.Space{{}}}}
	for _, space := range []int{-1, 1, 7} {
		if _, err := env.SpaceTokens(space); err == nil || !strings.Contains(err.Error(), "label space") {
			t.Errorf("SpaceTokens(%d): %v", space, err)
		}
		if _, err := env.ClassPromptTokens(space, "X"); err == nil || !strings.Contains(err.Error(), "label space") {
			t.Errorf("ClassPromptTokens(%d): %v", space, err)
		}
	}
}

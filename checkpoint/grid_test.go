package checkpoint

import "testing"

// TestGridSide: positional embeddings hold a square grid of patches plus
// one token; anything else (no patches, a non-square count) has no side.
func TestGridSide(t *testing.T) {
	for _, tc := range []struct{ tokens, want int }{
		{0, 0}, {1, 0}, {2, 1}, {5, 2}, {10, 3}, {50, 7}, {197, 14}, {257, 16},
		{3, 0}, {49, 0}, {198, 0},
	} {
		if got := gridSide(tc.tokens); got != tc.want {
			t.Errorf("gridSide(%d) = %d, want %d", tc.tokens, got, tc.want)
		}
	}
}

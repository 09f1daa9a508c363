package promptsrc

import (
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// tower runs one encoder's blocks with n prompt rows per sequence replaced
// at the input of blocks 1..J−1 (the same machinery as methods/maple's
// tower, which is unexported there). Segment s < J−1 is block s alone; the
// last segment is blocks J−1..L−1 (pooled). The blocks are private copies
// (Block.FrozenCopy) that share the frozen weights.
type tower struct {
	segs []clip.Stack
	off  int // first prompt position of every sequence
	n, D int
	B, T int

	in   [][]float32  // [J][B, T, D] input of each segment
	dbuf [2][]float32 // [B, T, D] backward ping-pong
	dp   [][]float32  // [J][n, D] gradients at the prompt rows
}

func newTower(blocks []*clip.Block, J, off, n int) *tower {
	t := &tower{off: off, n: n, D: blocks[0].D}
	for s := 0; s < J-1; s++ {
		t.segs = append(t.segs, clip.Stack{Blocks: []*clip.Block{blocks[s].FrozenCopy()}})
	}
	var last clip.Stack
	for _, b := range blocks[J-1:] {
		last.Blocks = append(last.Blocks, b.FrozenCopy())
	}
	t.segs = append(t.segs, last)
	t.in = make([][]float32, len(t.segs))
	t.dp = make([][]float32, len(t.segs))
	return t
}

// forward runs x0 [B, T, D] (the first block's input, prompt rows already in
// place) with deep[s] [n, D] replacing the prompt rows at the input of
// segment s ≥ 1, pools the last block at pool and returns [B, D].
func (t *tower) forward(x0 []float32, deep [][]float32, B, T int, pool []int, train bool) []float32 {
	t.B, t.T = B, T
	D, n := t.D, t.n
	x := x0
	for s := range t.segs {
		if s > 0 {
			// x_s = x_{s−1} with rows off..off+n of every sequence := deep[s]
			t.in[s] = nn.Grow(t.in[s], B*T*D)
			copy(t.in[s], x[:B*T*D])
			for b := 0; b < B; b++ {
				copy(t.in[s][(b*T+t.off)*D:(b*T+t.off+n)*D], deep[s])
			}
			x = t.in[s]
		}
		var p []int
		if s == len(t.segs)-1 {
			p = pool
		}
		x = t.segs[s].Forward(x, B, T, 0, len(t.segs[s].Blocks), p, train)
	}
	return x
}

// backward takes the gradient at the pooled output [B, D] and returns the
// gradient at x0 [B, T, D] (owned by t); t.dp[s], s ≥ 1, receive the
// gradients of deep[s] summed over the sequences.
func (t *tower) backward(dpool []float32) []float32 {
	B, T, D, n := t.B, t.T, t.D, t.n
	g := dpool
	for s := len(t.segs) - 1; s >= 0; s-- {
		k := s % 2
		t.dbuf[k] = nn.Grow(t.dbuf[k], B*T*D)
		d := t.dbuf[k]
		clear(d)
		t.segs[s].Backward(d, g)
		if s > 0 {
			// the replaced rows: their gradient goes to deep[s], none upstream
			t.dp[s] = nn.Grow(t.dp[s], n*D)
			clear(t.dp[s])
			for b := 0; b < B; b++ {
				rows := d[(b*T+t.off)*D : (b*T+t.off+n)*D]
				for i, v := range rows {
					t.dp[s][i] += v
				}
				clear(rows)
			}
		}
		g = d
	}
	return g
}

package clip

// Stack is a sequence of residual blocks with the buffers to run any range of
// them forward and backward. Blocks [0, from) can be run once and their
// output cached; blocks [from, to) are then run as often as needed.
type Stack struct {
	Blocks  []*Block
	scratch BlockScratch
	ping    [2][]float32 // eval-mode outputs, alternating
	outs    [][]float32  // train-mode outputs, one per block
	grads   [2][]float32 // backward ping-pong
	last    struct{ from, to, B, T int }
	split   [2][]float32 // SplitRecords' h and f
}

// Forward runs blocks [from, to) (0-based) on x [B, T, D]. When pool is not
// nil the last block is pruned to the pooled positions and the result is
// [B, D]; otherwise [B, T, D]. In train mode each block keeps its
// activations (and x is kept by reference) for Backward. The returned slice
// is owned by the stack and valid until the next call.
func (s *Stack) Forward(x []float32, B, T, from, to int, pool []int, train bool) []float32 {
	if from >= to {
		return x
	}
	D := s.Blocks[from].D
	if train && len(s.outs) < len(s.Blocks) {
		s.outs = make([][]float32, len(s.Blocks))
	}
	s.last.from, s.last.to, s.last.B, s.last.T = from, to, B, T
	in := x
	for i := from; i < to; i++ {
		var p []int
		n := B * T * D
		if i == to-1 && pool != nil {
			p, n = pool, B*D
		}
		var out []float32
		if train {
			s.outs[i] = growF(s.outs[i], n)
			out = s.outs[i]
		} else {
			k := (i - from) % 2
			s.ping[k] = growF(s.ping[k], B*T*D)
			out = s.ping[k][:n]
		}
		s.Blocks[i].Forward(out, in, B, T, p, train, &s.scratch)
		in = out
	}
	return in
}

// Backward propagates dout (the gradient of the last train-mode Forward's
// output) through the same blocks, accumulating adapter and weight
// gradients. dx, when not nil, receives (+=) the gradient with respect to
// the input of the first block; when nil the first block runs only the parts
// that have trainable parameters.
func (s *Stack) Backward(dx, dout []float32) {
	from, to, B, T := s.last.from, s.last.to, s.last.B, s.last.T
	if from >= to {
		if dx != nil {
			for i, v := range dout {
				dx[i] += v
			}
		}
		return
	}
	D := s.Blocks[from].D
	g := dout
	for i := to - 1; i >= from; i-- {
		var dIn []float32
		if i > from {
			k := (to - 1 - i) % 2
			s.grads[k] = growF(s.grads[k], B*T*D)
			dIn = s.grads[k]
			clear(dIn)
		} else {
			dIn = dx
		}
		s.Blocks[i].Backward(dIn, g, &s.scratch)
		g = dIn
	}
}

func growF(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n)
}

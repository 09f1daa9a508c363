package clip

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
)

// SetPrecision chooses the arithmetic of the frozen blocks' weight products
// in both encoders. gemm.BF16 rounds the four weight matrices of every block
// without weight gradients (G == nil) to bfloat16 once (the float32 weights
// are kept, shared and untouched); their forward products and the input
// gradients through them then run in bfloat16 with float32 accumulation.
// Everything else — trainable blocks, adapters, attention scores, LayerNorm,
// softmax, the heads and the loss — stays float32. gemm.FP32 (the default)
// drops the bfloat16 copies. gemm.Auto chooses one of the two by timing
// both at this model's shapes (ChoosePrecision) and logs the rates and the
// choice. Call it after EnableGrads (a block given gradients later runs in
// float32 whatever was set).
func (m *Model) SetPrecision(p gemm.Precision) error {
	if p == gemm.Auto {
		probe := m.ChoosePrecision()
		slog.Info("engine.precision auto", "cpu", gemm.CPU().String(), "choice", probe.Chosen.String(), "probe", probe.String())
		p = probe.Chosen
	}
	if err := m.Vision.Stack.SetPrecision(p); err != nil {
		return fmt.Errorf("clip: vision: %w", err)
	}
	if err := m.Text.Stack.SetPrecision(p); err != nil {
		return fmt.Errorf("clip: text: %w", err)
	}
	return nil
}

// probeBudget bounds the start-up probe of gemm.Auto (both precisions).
const probeBudget = 400 * time.Millisecond

// ChoosePrecision times the frozen image blocks' four weight products in
// float32 and in bfloat16 at this model's shapes (a batch of 8 images'
// tokens) and returns the rates and the faster precision (gemm.ProbePrecision).
func (m *Model) ChoosePrecision() gemm.Probe {
	c := m.Vision.Cfg
	tokens, D := 8*c.Tokens(), c.Width
	mlp := D
	if len(m.Vision.Stack.Blocks) > 0 {
		mlp = m.Vision.Stack.Blocks[0].MLP
	}
	return gemm.ProbePrecision([]gemm.Shape{{M: tokens, N: 3 * D, K: D}, {M: tokens, N: D, K: D}, {M: tokens, N: mlp, K: D}, {M: tokens, N: D, K: mlp}}, probeBudget)
}

// SetPrecision is Model.SetPrecision for the blocks of one stack.
func (s *Stack) SetPrecision(p gemm.Precision) error {
	for i, b := range s.Blocks {
		if err := b.SetPrecision(p); err != nil {
			return fmt.Errorf("block %d: %w", i, err)
		}
	}
	return nil
}

// Precision is the arithmetic of the block's weight products: gemm.BF16 when
// bfloat16 weights are set and the block is frozen, else gemm.FP32.
func (b *Block) Precision() gemm.Precision {
	if b.bf.inProj != nil && b.G == nil {
		return gemm.BF16
	}
	return gemm.FP32
}

// SetPrecision is Model.SetPrecision for one block; a block with weight
// gradients stays float32.
func (b *Block) SetPrecision(p gemm.Precision) error {
	if p != gemm.BF16 || b.G != nil {
		b.bf = blockBF16{}
		return nil
	}
	if b.bf.inProj != nil {
		return nil
	}
	D, MLP, w := b.D, b.MLP, b.W
	var bf blockBF16
	for _, c := range []struct {
		dst        **gemm.BF16Weights
		name       string
		x          []float32
		rows, cols int
	}{
		{&bf.inProj, "in_proj_weight", w.InProjW, 3 * D, D},
		{&bf.outProj, "out_proj.weight", w.OutProjW, D, D},
		{&bf.fc, "c_fc.weight", w.FcW, MLP, D},
		{&bf.proj, "c_proj.weight", w.ProjW, D, MLP},
	} {
		var err error
		if *c.dst, err = gemm.NewBF16Weights(c.x, c.rows, c.cols); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	bf.inQ, bf.inKV = bf.inProj.RowRange(0, D), bf.inProj.RowRange(D, 3*D)
	b.bf = bf
	return nil
}

// blockBF16 holds a frozen block's weight matrices rounded to bfloat16 (all
// nil in float32 mode).
type blockBF16 struct {
	inProj, inQ, inKV, outProj, fc, proj *gemm.BF16Weights
}

// linearForward is nn.LinearForward, in bfloat16 when wb is set and the
// block is frozen.
//
//	inp: [N, IC]; w: [OC, IC]; bias: [OC] or nil; out: [N, OC]
func (b *Block) linearForward(out, inp, w []float32, wb *gemm.BF16Weights, bias []float32, N, IC, OC int) {
	if wb != nil && b.G == nil {
		nn.LinearForwardBF16(out, inp, wb, bias, N, IC, OC)
		return
	}
	nn.LinearForward(out, inp, w, bias, N, IC, OC)
}

// linearBackward is nn.LinearBackward; a frozen block in bfloat16 (no weight
// gradients) computes the input gradient in bfloat16.
func (b *Block) linearBackward(dinp, dw, db, dout, inp, w []float32, wb *gemm.BF16Weights, N, IC, OC int) {
	if wb != nil && b.G == nil && dw == nil && db == nil {
		if dinp != nil {
			nn.LinearInputGradBF16(dinp, dout, wb, N, IC, OC)
		}
		return
	}
	nn.LinearBackward(dinp, dw, db, dout, inp, w, N, IC, OC)
}

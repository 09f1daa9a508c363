package optim

import (
	"fmt"
	"math"
)

// Schedule maps a step index (0-based) to a learning rate. The unit of a step
// is the caller's: pass the epoch index to step the schedule once per epoch
// (Dassl/CoOp-style trainers, pFedMoAP) or the iteration index to step it once
// per batch (CLIP-LoRA).
type Schedule interface {
	LR(step int) float64
}

// Constant is a fixed learning rate.
type Constant float64

// LR returns c for every step.
func (c Constant) LR(int) float64 { return float64(c) }

// Cosine is cosine annealing with an optional linear warmup. With W = Warmup
// and T = Total, at step t:
//
//	t < W:       lr = WarmupStart + (Base − WarmupStart)·t/W
//	W ≤ t ≤ T:   lr = Min + (Base − Min)·(1 + cos(π·(t − W)/(T − W)))/2
//	t > T:       lr = Min
//
// The middle line is the closed form of torch.optim.lr_scheduler.
// CosineAnnealingLR(T_max = T − W, eta_min = Min) after t − W calls to its
// step(); it starts at Base when warmup ends and reaches Min at t = T. PyTorch
// evaluates a recursive form that agrees up to float rounding, and past T_max
// it rises again where this schedule stays at Min. With T ≤ W the schedule is
// Base after warmup. Negative steps count as 0.
type Cosine struct {
	Base, Min   float64
	WarmupStart float64
	Warmup      int
	Total       int
}

// LR returns the learning rate at step t.
func (c Cosine) LR(t int) float64 {
	t = max(t, 0)
	if t < c.Warmup {
		return c.WarmupStart + (c.Base-c.WarmupStart)*float64(t)/float64(c.Warmup)
	}
	span := c.Total - c.Warmup
	if span <= 0 {
		return c.Base
	}
	if t > c.Total {
		return c.Min
	}
	return c.Min + (c.Base-c.Min)*(1+math.Cos(math.Pi*float64(t-c.Warmup)/float64(span)))/2
}

// Validate reports a schedule whose fields cannot describe a sensible run.
func (c Cosine) Validate() error {
	switch {
	case c.Warmup < 0:
		return fmt.Errorf("cosine schedule: negative warmup %d", c.Warmup)
	case c.Total < c.Warmup:
		return fmt.Errorf("cosine schedule: total %d shorter than warmup %d", c.Total, c.Warmup)
	case !(c.Base >= 0) || !(c.Min >= 0) || !(c.WarmupStart >= 0) || math.IsInf(c.Base, 0) || math.IsInf(c.Min, 0) || math.IsInf(c.WarmupStart, 0):
		return fmt.Errorf("cosine schedule: negative learning rate (base %g, min %g, warmup start %g)", c.Base, c.Min, c.WarmupStart)
	}
	return nil
}

package optim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/pfedmma/pfedmma/tensor"
)

// SGD is stochastic gradient descent with momentum and L2 weight decay,
// exactly as torch.optim.SGD with dampening 0:
//
//	g   = grad + WeightDecay·p
//	buf = g                      on a parameter's first step
//	buf = Momentum·buf + g       afterwards
//	g   = g + Momentum·buf       if Nesterov, else g = buf
//	p   = p − lr·g
//
// With Momentum 0 no buffer is kept and p = p − lr·g.
//
// State keys: "steps" (the Step count) and "momentum_buffer/<param>" per
// parameter that has been stepped.
type SGD struct {
	Momentum    float64
	WeightDecay float64
	Nesterov    bool

	steps int
	buf   map[string][]float32
}

// NewSGD returns an SGD optimizer with fresh state.
func NewSGD(momentum, weightDecay float64, nesterov bool) *SGD {
	return &SGD{Momentum: momentum, WeightDecay: weightDecay, Nesterov: nesterov}
}

// Steps is the number of Step calls made so far.
func (o *SGD) Steps() int { return o.steps }

// Step applies one SGD update with learning rate lr.
func (o *SGD) Step(lr float64, params []Param) error {
	if err := checkParams(params); err != nil {
		return fmt.Errorf("sgd step: %w", err)
	}
	for _, p := range params {
		if b, ok := o.buf[p.Name]; ok && p.Grad != nil && len(b) != len(p.Value) {
			return fmt.Errorf("sgd step: param %q has %d values but its momentum buffer %d", p.Name, len(p.Value), len(b))
		}
	}
	if o.buf == nil {
		o.buf = make(map[string][]float32)
	}
	wd, mom, neglr := float32(o.WeightDecay), float32(o.Momentum), float32(-lr)
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		if mom == 0 {
			for i, v := range p.Value {
				g := p.Grad[i]
				if wd != 0 {
					g = fma32(wd, v, g) // grad.add(p, alpha=wd)
				}
				p.Value[i] = fma32(neglr, g, v) // p.add_(g, alpha=-lr)
			}
			continue
		}
		buf, seen := o.buf[p.Name]
		if !seen {
			buf = make([]float32, len(p.Value))
			o.buf[p.Name] = buf
		}
		for i, v := range p.Value {
			g := p.Grad[i]
			if wd != 0 {
				g = fma32(wd, v, g)
			}
			if seen {
				buf[i] = float32(mom*buf[i]) + g // buf.mul_(m).add_(g)
			} else {
				buf[i] = g
			}
			if o.Nesterov {
				g = fma32(mom, buf[i], g) // g.add(buf, alpha=m)
			} else {
				g = buf[i]
			}
			p.Value[i] = fma32(neglr, g, v)
		}
	}
	o.steps++
	return nil
}

// State returns a deep copy of the step count and momentum buffers.
func (o *SGD) State() tensor.Named {
	st := tensor.Named{"steps": countTensor(o.steps)}
	for name, b := range o.buf {
		st["momentum_buffer/"+name] = vecTensor(b)
	}
	return st
}

// LoadState replaces the state with a deep copy of st, as produced by State.
// Buffer lengths are checked against the parameters on the next Step.
func (o *SGD) LoadState(st tensor.Named) error {
	steps, err := countValue("steps", st["steps"])
	if err != nil {
		return fmt.Errorf("sgd load state: %w", err)
	}
	buf := make(map[string][]float32)
	for _, key := range slices.Sorted(maps.Keys(st)) {
		if key == "steps" {
			continue
		}
		kind, name := splitKey(key)
		if kind != "momentum_buffer" || name == "" {
			return fmt.Errorf("sgd load state: unexpected entry %q", key)
		}
		if buf[name], err = vecValue(key, st[key]); err != nil {
			return fmt.Errorf("sgd load state: %w", err)
		}
	}
	o.steps, o.buf = steps, buf
	return nil
}

package optim

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/tensor"
)

// AdamW is Adam with decoupled weight decay, as torch.optim.AdamW
// (amsgrad off). Per parameter, at its step t (1-based):
//
//	p   = p·(1 − lr·WeightDecay)
//	m   = m + (1 − β1)·(g − m)           (torch lerp; m starts at 0)
//	v   = β2·v + (1 − β2)·g²
//	p   = p − (lr/(1 − β1^t)) · m / (√v/√(1 − β2^t) + Eps)
//
// Bias corrections are computed in float64 and rounded to float32 as PyTorch
// does with Python scalars.
//
// State keys: "steps" (the Step count), and per stepped parameter
// "step/<param>", "exp_avg/<param>", "exp_avg_sq/<param>".
type AdamW struct {
	Beta1, Beta2 float64
	Eps          float64
	WeightDecay  float64

	steps int
	param map[string]*adamState
}

type adamState struct {
	step   int
	m, v   []float32
	hasAll uint8 // LoadState bookkeeping: bit 0 step, 1 exp_avg, 2 exp_avg_sq
}

// NewAdamW returns an AdamW optimizer with PyTorch's defaults betas
// (0.9, 0.999) and eps 1e-8, and the given decoupled weight decay.
func NewAdamW(weightDecay float64) *AdamW {
	return &AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: weightDecay}
}

// Steps is the number of Step calls made so far.
func (o *AdamW) Steps() int { return o.steps }

// Step applies one AdamW update with learning rate lr.
func (o *AdamW) Step(lr float64, params []Param) error {
	if err := checkParams(params); err != nil {
		return fmt.Errorf("adamw step: %w", err)
	}
	for _, p := range params {
		if s, ok := o.param[p.Name]; ok && p.Grad != nil && (len(s.m) != len(p.Value) || len(s.v) != len(p.Value)) {
			return fmt.Errorf("adamw step: param %q has %d values but its moments %d and %d", p.Name, len(p.Value), len(s.m), len(s.v))
		}
	}
	if o.param == nil {
		o.param = make(map[string]*adamState)
	}
	b2 := float32(o.Beta2)
	omb1, omb2 := float32(1-o.Beta1), float32(1-o.Beta2)
	decay := float32(1 - lr*o.WeightDecay)
	eps := float32(o.Eps)
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		s, ok := o.param[p.Name]
		if !ok {
			s = &adamState{m: make([]float32, len(p.Value)), v: make([]float32, len(p.Value))}
			o.param[p.Name] = s
		}
		s.step++
		t := float64(s.step)
		bc1 := 1 - math.Pow(o.Beta1, t)
		bc2 := 1 - math.Pow(o.Beta2, t)
		negStep := float32(-lr / bc1)
		bc2Sqrt := float32(math.Sqrt(bc2))
		for i, x := range p.Value {
			g := p.Grad[i]
			if o.WeightDecay != 0 {
				x = float32(x * decay)
			}
			s.m[i] = fma32(omb1, g-s.m[i], s.m[i])
			s.v[i] = float32(b2*s.v[i]) + float32(float32(omb2*g)*g)
			denom := float32(float32(math.Sqrt(float64(s.v[i])))/bc2Sqrt) + eps
			p.Value[i] = x + float32(float32(negStep*s.m[i])/denom)
		}
	}
	o.steps++
	return nil
}

// State returns a deep copy of the step counts and moment estimates.
func (o *AdamW) State() tensor.Named {
	st := tensor.Named{"steps": countTensor(o.steps)}
	for name, s := range o.param {
		st["step/"+name] = countTensor(s.step)
		st["exp_avg/"+name] = vecTensor(s.m)
		st["exp_avg_sq/"+name] = vecTensor(s.v)
	}
	return st
}

// LoadState replaces the state with a deep copy of st, as produced by State.
// Every stepped parameter must have all three of its entries.
func (o *AdamW) LoadState(st tensor.Named) error {
	steps, err := countValue("steps", st["steps"])
	if err != nil {
		return fmt.Errorf("adamw load state: %w", err)
	}
	param := make(map[string]*adamState)
	get := func(name string) *adamState {
		s, ok := param[name]
		if !ok {
			s = &adamState{}
			param[name] = s
		}
		return s
	}
	for _, key := range slices.Sorted(maps.Keys(st)) {
		if key == "steps" {
			continue
		}
		kind, name := splitKey(key)
		if name == "" {
			return fmt.Errorf("adamw load state: unexpected entry %q", key)
		}
		switch kind {
		case "step":
			s := get(name)
			if s.step, err = countValue(key, st[key]); err != nil {
				return fmt.Errorf("adamw load state: %w", err)
			}
			s.hasAll |= 1
		case "exp_avg":
			s := get(name)
			if s.m, err = vecValue(key, st[key]); err != nil {
				return fmt.Errorf("adamw load state: %w", err)
			}
			s.hasAll |= 2
		case "exp_avg_sq":
			s := get(name)
			if s.v, err = vecValue(key, st[key]); err != nil {
				return fmt.Errorf("adamw load state: %w", err)
			}
			s.hasAll |= 4
		default:
			return fmt.Errorf("adamw load state: unexpected entry %q", key)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(param)) {
		s := param[name]
		for bit, kind := range []string{"step", "exp_avg", "exp_avg_sq"} {
			if s.hasAll&(1<<bit) == 0 {
				return fmt.Errorf("adamw load state: missing entry %q", kind+"/"+name)
			}
		}
		if len(s.m) != len(s.v) {
			return fmt.Errorf("adamw load state: %q has %d values but %q %d", "exp_avg/"+name, len(s.m), "exp_avg_sq/"+name, len(s.v))
		}
	}
	o.steps, o.param = steps, param
	return nil
}

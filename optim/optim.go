// Package optim holds the gradient-descent optimizers (SGD, AdamW) and
// learning-rate schedules used to train adapters and prompts, with state that
// can be checkpointed and restored exactly.
//
// An optimizer instance owns the state of one set of parameters (one client's
// adapters, say). Federated code must create one instance per client: the
// reference implementations share one optimizer, and therefore one set of
// momentum buffers, between all clients in turn, which is a bug.
//
// Arithmetic follows PyTorch's single-tensor (for-loop) implementations in
// float32, operation by operation: where PyTorch's vectorised CPU kernels use a
// fused multiply-add (Tensor.add_ with alpha, lerp_) so does this package
// (fma32); elsewhere every intermediate is rounded to float32 by an explicit
// conversion, so results do not depend on whether the Go compiler fuses
// multiply-adds. One SGD step reproduces the PyTorch fixture bit for bit.
package optim

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/pfedmma/pfedmma/tensor"
)

// Param is one trainable parameter: a flat view of its values and of its
// gradient, both of the same length. A Param with a nil Grad is skipped by
// Step (PyTorch skips parameters whose .grad is None).
type Param struct {
	Name  string
	Value []float32
	Grad  []float32
}

// Optimizer updates parameters in place from their gradients.
type Optimizer interface {
	// Step applies one update with learning rate lr to every param that has
	// a gradient. Params are identified by Name across steps.
	Step(lr float64, params []Param) error
	// Steps is the number of Step calls made so far (restored by LoadState).
	Steps() int
	// State returns a deep copy of the optimizer's state.
	State() tensor.Named
	// LoadState replaces the optimizer's state with a deep copy of st.
	LoadState(st tensor.Named) error
}

// fma32 returns a·b + c rounded once to float32. The product of two float32
// values is exact in float64, so only the sum is rounded there (a second
// rounding to float32 can differ from a true float32 FMA only when the float64
// sum lies exactly halfway between two float32 values).
func fma32(a, b, c float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

// ZeroGrad sets every gradient of params to zero.
func ZeroGrad(params []Param) {
	for _, p := range params {
		clear(p.Grad)
	}
}

// ClipGradNorm rescales all gradients together so that their global L2 norm
// is at most maxNorm, as torch.nn.utils.clip_grad_norm_ (with its 1e-6 added
// to the norm). It returns the norm before clipping.
func ClipGradNorm(params []Param, maxNorm float64) float64 {
	var ss float64
	for _, p := range params {
		for _, g := range p.Grad {
			ss += float64(g) * float64(g)
		}
	}
	norm := math.Sqrt(ss)
	coef := maxNorm / (norm + 1e-6)
	if coef < 1 {
		c := float32(coef)
		for _, p := range params {
			for i := range p.Grad {
				p.Grad[i] *= c
			}
		}
	}
	return norm
}

// checkParams validates lengths and names before any update is made, so a
// failed Step leaves every parameter untouched.
func checkParams(params []Param) error {
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if p.Name == "" {
			return errors.New("param with empty name")
		}
		if seen[p.Name] {
			return fmt.Errorf("param %q given twice", p.Name)
		}
		seen[p.Name] = true
		if p.Grad != nil && len(p.Grad) != len(p.Value) {
			return fmt.Errorf("param %q: %d values but %d gradients", p.Name, len(p.Value), len(p.Grad))
		}
	}
	return nil
}

// countBase splits step counts over two float32 values that each hold an
// integer below 2^24 exactly, so counts up to 2^48 survive a float32 store.
const countBase = 1 << 24

func countTensor(n int) *tensor.Tensor {
	return &tensor.Tensor{Shape: []int{2}, Data: []float32{float32(n / countBase), float32(n % countBase)}}
}

func countValue(name string, t *tensor.Tensor) (int, error) {
	if t == nil || len(t.Shape) != 1 || t.Shape[0] != 2 || len(t.Data) != 2 {
		return 0, fmt.Errorf("state entry %q: want shape [2] step count", name)
	}
	hi, lo := t.Data[0], t.Data[1]
	for _, v := range []float32{hi, lo} {
		if v < 0 || v >= countBase || v != float32(math.Trunc(float64(v))) {
			return 0, fmt.Errorf("state entry %q: invalid count component %v", name, v)
		}
	}
	return int(hi)*countBase + int(lo), nil
}

func vecTensor(v []float32) *tensor.Tensor {
	return &tensor.Tensor{Shape: []int{len(v)}, Data: append([]float32(nil), v...)}
}

func vecValue(name string, t *tensor.Tensor) ([]float32, error) {
	if t == nil || len(t.Shape) != 1 || t.Shape[0] != len(t.Data) {
		return nil, fmt.Errorf("state entry %q: want a 1-D tensor", name)
	}
	return append([]float32(nil), t.Data...), nil
}

// splitKey splits a state key "kind/param" into its kind and param name.
func splitKey(key string) (kind, param string) {
	kind, param, _ = strings.Cut(key, "/")
	return kind, param
}

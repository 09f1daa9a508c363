// Package tensor holds the one data type that crosses package boundaries in
// pfedmma: a dense, row-major float32 array with a shape.
//
// Model code works on plain []float32 slices with shapes written in comments
// (llm.c style); Tensor is used where data is named and stored: checkpoints,
// adapter parameters, federated messages.
package tensor

import "fmt"

// Tensor is a dense row-major float32 array.
type Tensor struct {
	Shape []int
	Data  []float32
}

// New returns a zero tensor of the given shape.
func New(shape ...int) *Tensor {
	return &Tensor{Shape: append([]int(nil), shape...), Data: make([]float32, Numel(shape))}
}

// FromData wraps data with a shape; it returns an error when the sizes differ.
func FromData(data []float32, shape ...int) (*Tensor, error) {
	if n := Numel(shape); n != len(data) {
		return nil, fmt.Errorf("tensor: shape %v needs %d values, got %d", shape, n, len(data))
	}
	return &Tensor{Shape: append([]int(nil), shape...), Data: data}, nil
}

// Numel is the number of elements of a shape (1 for a scalar shape []).
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Len is the number of elements of t.
func (t *Tensor) Len() int { return len(t.Data) }

// Clone returns a deep copy of t.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: append([]int(nil), t.Shape...), Data: append([]float32(nil), t.Data...)}
}

// SameShape reports whether a and b have identical shapes.
func SameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Named is a set of tensors keyed by name, the unit of checkpoints and of
// federated messages.
type Named map[string]*Tensor

// Clone deep-copies every tensor of n.
func (n Named) Clone() Named {
	out := make(Named, len(n))
	for k, v := range n {
		out[k] = v.Clone()
	}
	return out
}

package promptfed

import (
	"fmt"

	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// BatchLosses records the loss of every training batch of every client
// (before its step) as the production clients compute it: the reference
// fixtures' "client<i>.batch_losses".
type BatchLosses struct {
	last float64
	by   map[int][]float32
}

// RecordLosses makes spec's learners report each batch's loss to the
// returned recorder (spec is changed in place; its own AfterBackward still
// runs). Only for replaying fixture rounds: the wrapped learners hide their
// concrete types.
func RecordLosses(spec *Spec) *BatchLosses {
	r := &BatchLosses{by: map[int][]float32{}}
	newLearner, after := spec.NewLearner, spec.AfterBackward
	spec.NewLearner = func(tokens []int) (Learner, error) {
		l, err := newLearner(tokens)
		if err != nil {
			return nil, err
		}
		return &recording{Learner: l, r: r}, nil
	}
	spec.AfterBackward = func(c *Client, b train.Batch) error {
		r.by[c.Task.ID] = append(r.by[c.Task.ID], float32(r.last))
		if after != nil {
			return after(c, b)
		}
		return nil
	}
	return r
}

// Named returns "client<id>.batch_losses" for every client that trained.
func (r *BatchLosses) Named() tensor.Named {
	out := tensor.Named{}
	for id, v := range r.by {
		out[fmt.Sprintf("client%d.batch_losses", id)] = &tensor.Tensor{Shape: []int{len(v)}, Data: append([]float32(nil), v...)}
	}
	return out
}

// recording is a learner that keeps the loss of its last Step.
type recording struct {
	Learner
	r *BatchLosses
}

func (l *recording) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	loss, terms, logits, err := l.Learner.Step(img, labels)
	l.r.last = loss
	return loss, terms, logits, err
}

package train

import (
	"context"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/optim"
)

// batchRecorder is a Trainable that records its batches' sizes.
type batchRecorder struct {
	sizes []int
	items []int
	p     []float32
	g     []float32
}

func (r *batchRecorder) Params() []optim.Param {
	return []optim.Param{{Name: "w", Value: r.p, Grad: r.g}}
}

func (r *batchRecorder) Step(_ context.Context, b Batch) (float64, int, error) {
	r.sizes = append(r.sizes, len(b.Items))
	r.items = append(r.items, b.Items...)
	return 1, 0, nil
}

// TestDropLast: with DropLast (train.drop_last, Dassl's training loaders)
// each epoch's partial last batch is dropped when the client holds at
// least one full batch — 10 examples in batches of 4 train as 4, 4, of a
// shuffle of all 10 — and kept when it holds fewer (3 examples: one batch
// of 3, as Dassl's len(data) >= batch_size); without it the partial batch
// trains. Batches() counts what Run steps.
func TestDropLast(t *testing.T) {
	for _, c := range []struct {
		n    int
		drop bool
		want []int
	}{
		{10, true, []int{4, 4, 4, 4}},
		{10, false, []int{4, 4, 2, 4, 4, 2}},
		{3, true, []int{3, 3}},
		{8, true, []int{4, 4, 4, 4}},
	} {
		l, err := NewLoop(Options{Epochs: 2, Batch: 4, LR: 0.1, DropLast: c.drop}, c.n, 1, 2, "client")
		if err != nil {
			t.Fatal(err)
		}
		r := &batchRecorder{p: []float32{0}, g: []float32{0}}
		if _, err := l.Run(context.Background(), 0, r); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.sizes, c.want) {
			t.Errorf("%d examples, drop_last %v: batches %v, want %v", c.n, c.drop, r.sizes, c.want)
		}
		if l.Batches() != len(c.want) {
			t.Errorf("%d examples, drop_last %v: Batches() %d, Run stepped %d", c.n, c.drop, l.Batches(), len(c.want))
		}
		// each epoch's items are distinct: a shuffle of all n, cut
		per := len(r.items) / 2
		if ep := slices.Sorted(slices.Values(r.items[:per])); len(slices.Compact(ep)) != per {
			t.Errorf("%d examples: an epoch repeats an example: %v", c.n, r.items[:per])
		}
	}
}

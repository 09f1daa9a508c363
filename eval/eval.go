package eval

import (
	"context"
	"fmt"
)

// Scorer is a classifier over cached image prefixes: a method's
// personalised model, or frozen CLIP.
type Scorer interface {
	// Logits scores B prefixes (records of the evaluation store, back to
	// back) against the classes of label space space: [B, C].
	Logits(space int, prefix []float32, B int) ([]float32, error)
}

// Set is one evaluation set: records of the prefix store with their labels
// in the label space's logit order.
type Set struct {
	Name    string // metric name: "local", "base", "novel", "acc"
	Space   int
	Records []int
	Labels  []int
}

// Source reads prefix records into dst (RecordLen floats each).
type Source interface {
	GetBatch(idxs []int, dst []float32) error
}

// Evaluator runs Scorers over evaluation sets in batches, reusing one
// buffer of prefixes.
type Evaluator struct {
	Source    Source
	RecordLen int
	// Batch is the number of images scored at once (≥ 1).
	Batch int
	buf   []float32
}

// Accuracy returns the top-1 accuracy in percent of sc on each set, keyed
// by the set's name. Empty sets are left out.
func (e *Evaluator) Accuracy(ctx context.Context, sc Scorer, sets []Set) (Metrics, error) {
	B := max(e.Batch, 1)
	if n := B * e.RecordLen; len(e.buf) < n {
		e.buf = make([]float32, n)
	}
	out := Metrics{}
	for _, set := range sets {
		if len(set.Labels) != len(set.Records) {
			return nil, fmt.Errorf("eval set %s: %d labels for %d images", set.Name, len(set.Labels), len(set.Records))
		}
		correct := 0
		for s := 0; s < len(set.Records); s += B {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			recs := set.Records[s:min(s+B, len(set.Records))]
			buf := e.buf[:len(recs)*e.RecordLen]
			if err := e.Source.GetBatch(recs, buf); err != nil {
				return nil, fmt.Errorf("eval set %s: %w", set.Name, err)
			}
			logits, err := sc.Logits(set.Space, buf, len(recs))
			if err != nil {
				return nil, fmt.Errorf("eval set %s: %w", set.Name, err)
			}
			C := len(logits) / max(len(recs), 1)
			for k := range recs {
				if Argmax(logits[k*C:(k+1)*C]) == set.Labels[s+k] {
					correct++
				}
			}
		}
		if len(set.Records) > 0 {
			out[set.Name] = 100 * float64(correct) / float64(len(set.Records))
		}
	}
	return out, nil
}

// Argmax returns the index of the largest value (the first on ties).
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// WithHM adds "hm" = HM(local, base, novel) when m holds the three
// base-to-novel accuracies.
func WithHM(m Metrics) Metrics {
	l, okl := m["local"]
	b, okb := m["base"]
	n, okn := m["novel"]
	if okl && okb && okn {
		m["hm"] = HM(l, b, n)
	}
	return m
}

// ClientMean averages per-client metrics; "hm" is recomputed as the
// harmonic mean of the averaged Local, Base and Novel (the paper's HM), not
// the mean of per-client HMs.
func ClientMean(clients ...Metrics) Metrics {
	m := MeanOf(clients...)
	if _, ok := m["hm"]; ok {
		WithHM(m)
	}
	return m
}

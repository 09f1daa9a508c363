package methods

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/protocol"
)

// EvaluateGroup is Evaluate for several clients of one method at once:
// each client's scorer scs[i] on the evaluation sets of tasks[i]. Sets that
// several clients share (the same label space and test records, such as
// base-to-novel's Base and Novel sets) are read from the test store once,
// batch by batch, and prepare (when not nil) runs once on each batch before
// the clients' scorers score it: the place for what does not depend on the
// client (the frozen blocks on the cached prefixes). Batches are cut as
// Evaluate cuts them, so each client's metrics and logits (OnEvaluate) are
// bit-identical to its own Evaluate's.
func (e *Env) EvaluateGroup(ctx context.Context, prepare func(prefix []float32, B int) error, scs []eval.Scorer, tasks []*protocol.ClientTask) ([]eval.Metrics, error) {
	if len(scs) != len(tasks) {
		return nil, fmt.Errorf("group evaluation: %d scorers for %d clients", len(scs), len(tasks))
	}
	type member struct{ client, set int }
	type shared struct {
		set     eval.Set
		members []member
	}
	var order []*shared
	byKey := map[string]*shared{}
	sets := make([][]eval.Set, len(tasks))
	correct := make([][]int, len(tasks))
	var logits [][][]float32
	onEvaluate := ObserverFrom(ctx).OnEvaluate
	if onEvaluate != nil {
		logits = make([][][]float32, len(tasks))
	}
	for i, t := range tasks {
		sets[i] = e.EvalSets(t)
		correct[i] = make([]int, len(sets[i]))
		if logits != nil {
			logits[i] = make([][]float32, len(sets[i]))
		}
		for k, s := range sets[i] {
			if len(s.Labels) != len(s.Records) {
				return nil, fmt.Errorf("eval set %s: %d labels for %d images", s.Name, len(s.Labels), len(s.Records))
			}
			key := setKey(s)
			sh, ok := byKey[key]
			if !ok {
				sh = &shared{set: s}
				byKey[key] = sh
				order = append(order, sh)
			}
			sh.members = append(sh.members, member{i, k})
		}
	}
	ev := e.Evaluator
	B := max(ev.Batch, 1)
	var buf []float32
	for _, sh := range order {
		set := sh.set
		for s := 0; s < len(set.Records); s += B {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			recs := set.Records[s:min(s+B, len(set.Records))]
			buf = nn.Grow(buf, len(recs)*ev.RecordLen)
			if err := ev.Source.GetBatch(recs, buf); err != nil {
				return nil, fmt.Errorf("eval set %s: %w", set.Name, err)
			}
			if prepare != nil {
				if err := prepare(buf, len(recs)); err != nil {
					return nil, fmt.Errorf("eval set %s: %w", set.Name, err)
				}
			}
			for _, m := range sh.members {
				l, err := scs[m.client].Logits(set.Space, buf, len(recs))
				if err != nil {
					return nil, fmt.Errorf("client %d: eval set %s: %w", tasks[m.client].ID, set.Name, err)
				}
				labels := sets[m.client][m.set].Labels
				C := len(l) / len(recs)
				for k := range recs {
					if eval.Argmax(l[k*C:(k+1)*C]) == labels[s+k] {
						correct[m.client][m.set]++
					}
				}
				if logits != nil {
					logits[m.client][m.set] = append(logits[m.client][m.set], l...)
				}
			}
		}
	}
	return e.groupMetrics(tasks, sets, correct, logits, onEvaluate), nil
}

// groupMetrics turns each client's correct counts per evaluation set into
// its accuracy metrics (with the harmonic mean for base-to-novel), handing
// the logits to onEvaluate (the context's Observer's) when kept.
func (e *Env) groupMetrics(tasks []*protocol.ClientTask, sets [][]eval.Set, correct [][]int, logits [][][]float32,
	onEvaluate func(*protocol.ClientTask, [][]float32)) []eval.Metrics {
	out := make([]eval.Metrics, len(tasks))
	for i, t := range tasks {
		m := eval.Metrics{}
		for k, s := range sets[i] {
			if len(s.Records) > 0 {
				m[s.Name] = 100 * float64(correct[i][k]) / float64(len(s.Records))
			}
		}
		if e.Task.Protocol == protocol.BaseToNovel {
			eval.WithHM(m)
		}
		if logits != nil {
			onEvaluate(t, logits[i])
		}
		out[i] = m
	}
	return out
}

// setKey identifies an evaluation set by its label space and records.
func setKey(s eval.Set) string {
	b := make([]byte, 0, 8*(len(s.Records)+1))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.Space))
	for _, r := range s.Records {
		b = binary.LittleEndian.AppendUint64(b, uint64(r))
	}
	return string(b)
}

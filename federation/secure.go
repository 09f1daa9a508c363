package federation

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/pfedmma/pfedmma/secagg"
	"github.com/pfedmma/pfedmma/tensor"
)

// SecureAggregator aggregates a round's uploads so that the coordinator
// never holds one site's update in the clear (package secagg): the
// coordinator hands it the round's results, which over a network carry no
// tensors (the masked inputs stay in the transport), and the strategy then
// aggregates the one result Combine returns — the weighted mean, as FedAvg
// of a single result is that result.
type SecureAggregator interface {
	// Begin is called before round's fit tasks go out (again on a retried
	// round) with the selected clients; it returns settings added to every
	// FitIns.Config of the round.
	Begin(round int, selected []int) (map[string]string, error)
	// Combine turns the round's results into the one result the strategy
	// aggregates: ClientID the first participant's, NumExamples the total,
	// Params the weighted (or uniform) mean within the quantiser's bound.
	Combine(ctx context.Context, round int, results []FitResult) (FitResult, error)
}

// SecureWeight is a client's weight in secure aggregation: its example
// count for a weighted mean (FedAvg), 1 for a uniform mean.
func SecureWeight(numExamples int, uniform bool) (uint64, error) {
	if uniform {
		return 1, nil
	}
	if numExamples < 1 {
		return 0, fmt.Errorf("secure aggregation: an update of %d examples has no weight", numExamples)
	}
	return uint64(numExamples), nil
}

// Layout is the order in which secure aggregation flattens a result's
// tensors: the sorted names and their shapes.
type Layout struct {
	Names  []string
	Shapes [][]int
}

// LayoutOf returns p's layout.
func LayoutOf(p tensor.Named) Layout {
	var l Layout
	for _, k := range slices.Sorted(maps.Keys(p)) {
		l.Names = append(l.Names, k)
		l.Shapes = append(l.Shapes, slices.Clone(p[k].Shape))
	}
	return l
}

// Len is the number of values of the layout.
func (l Layout) Len() int {
	n := 0
	for _, s := range l.Shapes {
		n += tensor.Numel(s)
	}
	return n
}

// Equal reports whether two layouts are the same.
func (l Layout) Equal(o Layout) bool {
	return slices.Equal(l.Names, o.Names) && slices.EqualFunc(l.Shapes, o.Shapes, slices.Equal)
}

// Flatten concatenates p's tensors in layout order.
func Flatten(p tensor.Named) ([]float32, Layout) {
	l := LayoutOf(p)
	out := make([]float32, 0, l.Len())
	for _, k := range l.Names {
		out = append(out, p[k].Data...)
	}
	return out, l
}

// Unflatten rebuilds tensors from values in layout order, rounding to
// float32.
func (l Layout) Unflatten(v []float64) (tensor.Named, error) {
	if len(v) != l.Len() {
		return nil, fmt.Errorf("secure aggregation: %d values for a layout of %d", len(v), l.Len())
	}
	out := make(tensor.Named, len(l.Names))
	off := 0
	for i, k := range l.Names {
		t := tensor.New(l.Shapes[i]...)
		for j := range t.Data {
			t.Data[j] = float32(v[off+j])
		}
		off += len(t.Data)
		out[k] = t
	}
	return out, nil
}

// SimulatedSecure is secure aggregation in one process (`pfedmma run`): it
// quantises every result exactly as the sites of a networked federation do
// and sums them in Z_2^64 without masks, which gives the same bits as the
// protocol (the masks cancel exactly), so that a simulation equals a
// networked run with secure aggregation.
type SimulatedSecure struct {
	Quant   secagg.Quantizer
	Uniform bool
}

// Begin implements SecureAggregator: nothing to send.
func (s *SimulatedSecure) Begin(int, []int) (map[string]string, error) { return nil, nil }

// Combine implements SecureAggregator.
func (s *SimulatedSecure) Combine(_ context.Context, round int, results []FitResult) (FitResult, error) {
	if len(results) == 0 {
		return FitResult{}, fmt.Errorf("secure aggregation round %d: no results", round)
	}
	var xs [][]float32
	var ws []uint64
	var layout Layout
	total := 0
	for i, r := range results {
		x, l := Flatten(r.Params)
		if i == 0 {
			layout = l
		} else if !l.Equal(layout) {
			return FitResult{}, fmt.Errorf("secure aggregation round %d: client %d uploaded tensors %v, client %d %v", round, r.ClientID, l.Names, results[0].ClientID, layout.Names)
		}
		w, err := SecureWeight(r.NumExamples, s.Uniform)
		if err != nil {
			return FitResult{}, fmt.Errorf("client %d: %w", r.ClientID, err)
		}
		xs, ws = append(xs, x), append(ws, w)
		total += r.NumExamples
	}
	if layout.Len() == 0 {
		return FitResult{ClientID: results[0].ClientID, NumExamples: total, Params: tensor.Named{}}, nil
	}
	mean, err := s.Quant.Aggregate(xs, ws)
	if err != nil {
		return FitResult{}, fmt.Errorf("secure aggregation round %d: %w", round, err)
	}
	p, err := layout.Unflatten(mean)
	if err != nil {
		return FitResult{}, err
	}
	return FitResult{ClientID: results[0].ClientID, NumExamples: total, Params: p}, nil
}

// beginSecure adds the secure aggregator's settings for round to cfg.
func (c *Coordinator) beginSecure(r int, selected []int, cfg map[string]string) (map[string]string, error) {
	if c.Secure == nil {
		return cfg, nil
	}
	extra, err := c.Secure.Begin(r, selected)
	if err != nil {
		return nil, fmt.Errorf("secure aggregation: %w", err)
	}
	if len(extra) == 0 {
		return cfg, nil
	}
	out := make(map[string]string, len(cfg)+len(extra))
	maps.Copy(out, cfg)
	maps.Copy(out, extra)
	return out, nil
}

// combineSecure replaces the round's results by their secure aggregate,
// and counts as the round's upload what the sites sent of their updates:
// MaskedBytes each (the same in simulation and over the network).
func (c *Coordinator) combineSecure(ctx context.Context, r int, results []FitResult, rep *RoundReport) ([]FitResult, error) {
	if c.Secure == nil {
		return results, nil
	}
	comb, err := c.Secure.Combine(ctx, r, results)
	if err != nil {
		return nil, fmt.Errorf("secure aggregation: %w", err)
	}
	rep.BytesUp = int64(len(results)) * MaskedBytes(LayoutOf(comb.Params).Len())
	return []FitResult{comb}, nil
}

// MaskedBytes is the size of a masked update of n values: n + 1 words
// (the weight) of 8 bytes. Keys and shares, a few hundred bytes per
// neighbour, are not counted.
func MaskedBytes(n int) int64 { return 8 * int64(n+1) }

// checkSecure refuses secure aggregation when a sampled round would take a
// single client: its "sum" would be its update.
func (c *Coordinator) checkSecure() error {
	if c.Secure == nil {
		return nil
	}
	if n := NewSampler(c.Fraction, 0).Count(len(c.Proxies)); n < 2 {
		return fmt.Errorf("secure aggregation needs at least 2 clients a round: %d clients at fraction %g give %d (raise federation.fraction or federation.clients)", len(c.Proxies), c.Fraction, n)
	}
	return nil
}

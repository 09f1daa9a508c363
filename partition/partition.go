// Package partition deals a dataset out to federated clients the way the
// pFedMMA experiments do: few-shot sampling, the base/novel class split, the
// pathological (disjoint classes) split, Dirichlet label shift, and domain ×
// Dirichlet feature-and-label shift. Every draw follows the run seed through
// a PCG generator (math/rand/v2), so a seed reproduces a partition exactly.
//
// Partitions are returned as [Client] values holding indices into the
// dataset's slices; [Select] turns indices into items, relabelling them when
// a label map is given.
package partition

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/pfedmma/pfedmma/dataset"
)

// Client is one federated client's share of a dataset.
type Client struct {
	// ID is the client's index in the partition.
	ID int
	// Domain is the dataset domain the client's data comes from.
	Domain int
	// Classes are the (original) labels the client holds training data
	// of, ascending.
	Classes []int
	// Train indexes the training items the client holds.
	Train []int
	// Test indexes the client's local test items.
	Test []int
}

// Streams of the PCG generator, one per kind of draw, so that one run seed
// drives independent draws.
const (
	streamFewShot uint64 = 0x70666d6d61 + iota
	streamPathological
	streamDirichlet
	streamDomain // + domain index
)

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// Select returns copies of items[i] for i in idx. With a non-nil relabel
// map each label is replaced by relabel[label]; a label missing from the
// map is an error, as is an index out of range.
func Select(items []dataset.Item, idx []int, relabel map[int]int) ([]dataset.Item, error) {
	out := make([]dataset.Item, len(idx))
	for k, i := range idx {
		if i < 0 || i >= len(items) {
			return nil, fmt.Errorf("partition: select: index %d outside [0,%d)", i, len(items))
		}
		it := items[i]
		if relabel != nil {
			l, ok := relabel[it.Label]
			if !ok {
				return nil, fmt.Errorf("partition: select: item %q: label %d not in the label map", it.Key, it.Label)
			}
			it.Label = l
		}
		out[k] = it
	}
	return out, nil
}

// byLabel groups item indices by label; labels are returned ascending and
// each group keeps the items' order.
func byLabel(labels []int, idx []int) (sorted []int, groups map[int][]int) {
	groups = map[int][]int{}
	for _, i := range idx {
		groups[labels[i]] = append(groups[labels[i]], i)
	}
	for l := range groups {
		sorted = append(sorted, l)
	}
	slices.Sort(sorted)
	return sorted, groups
}

// labelsOf extracts the labels of items.
func labelsOf(items []dataset.Item) []int {
	out := make([]int, len(items))
	for i, it := range items {
		out[i] = it.Label
	}
	return out
}

func iota0(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

package partition

import (
	"fmt"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/dataset"
)

// BaseNovel splits a dataset's classes in half: with labels 0..n-1 sorted,
// base = the first ceil(n/2), novel = the rest. Each half is relabelled
// from 0 in label order.
type BaseNovel struct {
	// Base and Novel are the original labels of each half, ascending.
	Base, Novel []int
	// BaseMap and NovelMap map an original label to its index in Base or
	// Novel.
	BaseMap, NovelMap map[int]int
}

// SplitBaseNovel splits labels 0..numClasses-1; numClasses must be at
// least 2.
func SplitBaseNovel(numClasses int) (BaseNovel, error) {
	if numClasses < 2 {
		return BaseNovel{}, fmt.Errorf("partition: base/novel split of %d classes: need at least 2", numClasses)
	}
	nBase := (numClasses + 1) / 2
	b := BaseNovel{BaseMap: map[int]int{}, NovelMap: map[int]int{}}
	for l := range numClasses {
		if l < nBase {
			b.BaseMap[l] = len(b.Base)
			b.Base = append(b.Base, l)
		} else {
			b.NovelMap[l] = len(b.Novel)
			b.Novel = append(b.Novel, l)
		}
	}
	return b, nil
}

// BaseNames returns the names of the base classes in base-label order.
func (b BaseNovel) BaseNames(classes []string) []string { return pick(classes, b.Base) }

// NovelNames returns the names of the novel classes in novel-label order.
func (b BaseNovel) NovelNames(classes []string) []string { return pick(classes, b.Novel) }

func pick(names []string, idx []int) []string {
	out := make([]string, 0, len(idx))
	for _, i := range idx {
		if i < len(names) {
			out = append(out, names[i])
		}
	}
	return out
}

// Pathological deals classes to numClients clients without overlap: the
// classes are shuffled with the seed, each client takes a contiguous slice
// of round(len(classes)/numClients) classes (Python's round, half to even)
// and the last client takes the remainder. It fails when a client would be
// left without classes.
func Pathological(classes []int, numClients int, seed uint64) ([][]int, error) {
	c := len(classes)
	if numClients < 1 {
		return nil, fmt.Errorf("partition: pathological split: %d clients", numClients)
	}
	per := int(math.RoundToEven(float64(c) / float64(numClients)))
	if per < 1 || per*(numClients-1) >= c {
		return nil, fmt.Errorf("partition: pathological split of %d classes over %d clients: %d classes per client leaves a client empty", c, numClients, per)
	}
	shuffled := slices.Clone(classes)
	rng := newRand(seed, streamPathological)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	out := make([][]int, numClients)
	for i := range out {
		hi := (i + 1) * per
		if i == numClients-1 {
			hi = c
		}
		out[i] = slices.Clone(shuffled[i*per : hi])
	}
	return out, nil
}

// BaseToNovel is the base-to-novel federated benchmark: base classes dealt
// to clients by [Pathological], with the test sets each client is scored on.
type BaseToNovel struct {
	// Split is the base/novel class split and its label maps.
	Split BaseNovel
	// Clients hold their base classes (original labels); Train indexes
	// the training items given to NewBaseToNovel (normally a few-shot
	// draw) and Test is the client's Local test set: every test item of
	// its own classes.
	Clients []Client
	// Base indexes every base-class test item, Novel every novel-class
	// test item.
	Base, Novel []int
}

// NewBaseToNovel splits numClasses classes into base and novel, deals the
// base classes to numClients clients with the seed, and indexes train and
// test accordingly. Novel-class training items are never given to clients.
func NewBaseToNovel(train, test []dataset.Item, numClasses, numClients int, seed uint64) (*BaseToNovel, error) {
	split, err := SplitBaseNovel(numClasses)
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		name  string
		items []dataset.Item
	}{{"train", train}, {"test", test}} {
		for i, it := range s.items {
			if it.Label < 0 || it.Label >= numClasses {
				return nil, fmt.Errorf("partition: base-to-novel: %s[%d] %q: label %d outside [0,%d)", s.name, i, it.Key, it.Label, numClasses)
			}
		}
	}
	deal, err := Pathological(split.Base, numClients, seed)
	if err != nil {
		return nil, err
	}
	owner := map[int]int{} // base label -> client
	b := &BaseToNovel{Split: split, Clients: make([]Client, numClients)}
	for ci, classes := range deal {
		slices.Sort(classes)
		b.Clients[ci] = Client{ID: ci, Classes: classes}
		for _, l := range classes {
			owner[l] = ci
		}
	}
	for i, it := range train {
		if ci, ok := owner[it.Label]; ok {
			b.Clients[ci].Train = append(b.Clients[ci].Train, i)
		}
	}
	for i, it := range test {
		if ci, ok := owner[it.Label]; ok {
			b.Clients[ci].Test = append(b.Clients[ci].Test, i)
			b.Base = append(b.Base, i)
		} else {
			b.Novel = append(b.Novel, i)
		}
	}
	for _, c := range b.Clients {
		if len(c.Train) == 0 {
			return nil, fmt.Errorf("partition: base-to-novel: client %d (classes %v) has no training items", c.ID, c.Classes)
		}
	}
	return b, nil
}

// OthersBase indexes the base-class test items of classes the client does
// not hold (pFedMMA's "Base" reading; [BaseToNovel.Base] is the full set).
// test must be the slice given to [NewBaseToNovel]; an unknown client gives
// nil.
func (b *BaseToNovel) OthersBase(test []dataset.Item, client int) []int {
	if client < 0 || client >= len(b.Clients) {
		return nil
	}
	own := b.Clients[client].Classes
	var out []int
	for _, i := range b.Base {
		if i < len(test) && !slices.Contains(own, test[i].Label) {
			out = append(out, i)
		}
	}
	return out
}

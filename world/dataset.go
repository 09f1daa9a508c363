package world

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/pfedmma/pfedmma/dataset"
)

// DatasetOptions selects a classification dataset from the world. Zero
// fields take the documented defaults.
type DatasetOptions struct {
	// Name is the dataset name; default "world".
	Name string
	// Classes fixes the label order. When nil, ChooseClasses(NumClasses,
	// Seed) picks them: seen compositions first (base), held-out ones second
	// (novel).
	Classes []Composition
	// NumClasses is the number of classes when Classes is nil; default 20.
	NumClasses int
	// TrainPerClass, ValPerClass and TestPerClass are images per class and
	// domain; defaults 16, 0 and 16.
	TrainPerClass, ValPerClass, TestPerClass int
	// Domains are the rendering styles included, in domain-index order;
	// default all four.
	Domains []Domain
	// Size is the image side; default the world's Size.
	Size int
	// Seed picks the classes (when Classes is nil) and the image stream, so
	// different seeds give different images of the same classes.
	Seed uint64
}

// ChooseClasses returns k distinct compositions in label order for the
// base-to-novel protocol, which takes the first half as base classes and
// the rest as novel: the last k-k/2 are held-out compositions (seen ones
// fill in if too few are held out), and the first k/2 are seen compositions
// picked greedily to cover every colour, pattern and shape used by the
// novel half. The choice is a pure function of the world, k and seed.
func (w *World) ChooseClasses(k int, seed uint64) ([]Composition, error) {
	if k < 1 || k > NumCompositions {
		return nil, fmt.Errorf("world: choose %d classes: want 1..%d: %w", k, NumCompositions, ErrConfig)
	}
	r := rand.New(rand.NewPCG(mix(w.cfg.Seed, seed), 0xc1a55e5))
	held := permuted(r, w.heldIDs)
	seen := permuted(r, w.seenIDs)
	nNovel := k - k/2
	nh := min(nNovel, len(held))
	novel := slices.Clone(held[:nh])
	if fill := nNovel - len(novel); fill > 0 {
		novel = append(novel, seen[:fill]...)
		seen = seen[fill:]
	}
	// base classes come from the seen compositions left; held-out ones
	// fill in only when an explicit HeldOut list leaves too few seen.
	if len(seen) < k/2 {
		seen = append(seen, held[nh:]...)
	}
	// attribute values the novel classes use, still uncovered by base.
	need := map[[2]int]bool{}
	for _, id := range novel {
		c, _ := CompositionAt(id)
		need[[2]int{0, int(c.Colour)}] = true
		need[[2]int{1, int(c.Pattern)}] = true
		need[[2]int{2, int(c.Shape)}] = true
	}
	gain := func(id int) int {
		c, _ := CompositionAt(id)
		g := 0
		for _, a := range [][2]int{{0, int(c.Colour)}, {1, int(c.Pattern)}, {2, int(c.Shape)}} {
			if need[a] {
				g++
			}
		}
		return g
	}
	base := make([]int, 0, k/2)
	for len(base) < k/2 {
		best, bestGain := -1, -1
		for j, id := range seen {
			if id < 0 {
				continue
			}
			if g := gain(id); g > bestGain {
				best, bestGain = j, g
			}
		}
		c, _ := CompositionAt(seen[best])
		delete(need, [2]int{0, int(c.Colour)})
		delete(need, [2]int{1, int(c.Pattern)})
		delete(need, [2]int{2, int(c.Shape)})
		base = append(base, seen[best])
		seen[best] = -1
	}
	return compositions(append(base, novel...)), nil
}

func permuted(r *rand.Rand, ids []int) []int {
	out := slices.Clone(ids)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Dataset builds a labelled dataset of the world's images in the dataset
// package's form: labels index the chosen classes, domains index the chosen
// styles, and every item renders lazily through a Source.
func (w *World) Dataset(opts DatasetOptions) (*dataset.Dataset, error) {
	if opts.Name == "" {
		opts.Name = "world"
	}
	if opts.NumClasses == 0 {
		opts.NumClasses = 20
	}
	if opts.TrainPerClass == 0 {
		opts.TrainPerClass = 16
	}
	if opts.TestPerClass == 0 {
		opts.TestPerClass = 16
	}
	if opts.Size == 0 {
		opts.Size = w.cfg.Size
	}
	if opts.TrainPerClass < 0 || opts.ValPerClass < 0 || opts.TestPerClass < 0 {
		return nil, fmt.Errorf("world: dataset %s: negative images per class (%d/%d/%d): %w",
			opts.Name, opts.TrainPerClass, opts.ValPerClass, opts.TestPerClass, ErrConfig)
	}
	if opts.Size < 8 || opts.Size > 1024 {
		return nil, fmt.Errorf("world: dataset %s: image size %d (dataset.image_size) not in [8, 1024]: %w", opts.Name, opts.Size, ErrConfig)
	}
	classes, err := w.datasetClasses(opts)
	if err != nil {
		return nil, err
	}
	domains, err := datasetDomains(opts)
	if err != nil {
		return nil, err
	}
	ds := &dataset.Dataset{Name: opts.Name}
	for _, c := range classes {
		ds.Classes = append(ds.Classes, c.Name())
	}
	for _, d := range domains {
		ds.Domains = append(ds.Domains, d.String())
	}
	// validation images are train-split images after the training ones.
	items := func(split Split, first, n int) []dataset.Item {
		out := make([]dataset.Item, 0, n*len(classes)*len(domains))
		for di, d := range domains {
			for label, c := range classes {
				for k := range n {
					s := Spec{Split: split, Class: c, Domain: d, Index: first + k, Stream: opts.Seed}
					out = append(out, dataset.Item{Key: s.Key(), Label: label, Domain: di, Source: Source{World: w, Spec: s, Size: opts.Size}})
				}
			}
		}
		return out
	}
	ds.Train = items(TrainSplit, 0, opts.TrainPerClass)
	ds.Val = items(TrainSplit, opts.TrainPerClass, opts.ValPerClass)
	ds.Test = items(TestSplit, 0, opts.TestPerClass)
	if err := ds.Validate(); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	return ds, nil
}

// datasetClasses are opts.Classes, or as many drawn by the seed as
// opts.NumClasses; each must be valid and appear once.
func (w *World) datasetClasses(opts DatasetOptions) ([]Composition, error) {
	classes := opts.Classes
	if classes == nil {
		var err error
		if classes, err = w.ChooseClasses(opts.NumClasses, opts.Seed); err != nil {
			return nil, fmt.Errorf("world: dataset %s: %w", opts.Name, err)
		}
	}
	if len(classes) == 0 {
		return nil, fmt.Errorf("world: dataset %s: Classes is empty: %w", opts.Name, ErrConfig)
	}
	dup := map[Composition]bool{}
	for i, c := range classes {
		if !c.valid() {
			return nil, fmt.Errorf("world: dataset %s: Classes[%d] = %+v out of range: %w", opts.Name, i, c, ErrConfig)
		}
		if dup[c] {
			return nil, fmt.Errorf("world: dataset %s: Classes[%d] %q repeated: %w", opts.Name, i, c.Name(), ErrConfig)
		}
		dup[c] = true
	}
	return classes, nil
}

// datasetDomains are opts.Domains, or the four styles; each must be known
// and appear once.
func datasetDomains(opts DatasetOptions) ([]Domain, error) {
	domains := opts.Domains
	if domains == nil {
		domains = []Domain{Photo, Clipart, Sketch, Painting}
	}
	if len(domains) == 0 {
		return nil, fmt.Errorf("world: dataset %s: Domains is empty: %w", opts.Name, ErrConfig)
	}
	for i, d := range domains {
		if d < 0 || int(d) >= NumDomains {
			return nil, fmt.Errorf("world: dataset %s: Domains[%d] = %d out of range: %w", opts.Name, i, int(d), ErrConfig)
		}
		if slices.Index(domains, d) != i {
			return nil, fmt.Errorf("world: dataset %s: Domains[%d] %s repeated: %w", opts.Name, i, d, ErrConfig)
		}
	}
	return domains, nil
}

// Load is a dataset.LoaderFunc for the default world (DefaultConfig): it
// ignores root, takes the seed from opts.Seed and the styles from
// opts.Domains (names as in Domains), and otherwise uses DatasetOptions
// defaults. Importing this package registers it as dataset "world".
func Load(root string, opts dataset.Options) (*dataset.Dataset, error) {
	w, err := New(DefaultConfig())
	if err != nil {
		return nil, err
	}
	do := DatasetOptions{Seed: opts.Seed, NumClasses: opts.NumClasses,
		TrainPerClass: opts.TrainPerClass, TestPerClass: opts.TestPerClass, Size: opts.ImageSize}
	for i, name := range opts.Domains {
		j := slices.Index(Domains[:], name)
		if j < 0 {
			return nil, fmt.Errorf("world: dataset options: Domains[%d] = %q: want one of %v: %w", i, name, Domains, ErrConfig)
		}
		do.Domains = append(do.Domains, Domain(j))
	}
	return w.Dataset(do)
}

func init() {
	// A duplicate registration is a programming error in the binary.
	if err := dataset.Register("world", Load); err != nil {
		panic(err)
	}
}

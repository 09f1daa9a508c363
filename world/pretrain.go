package world

import (
	"fmt"
	"image"
)

// Source renders one sample on demand. It satisfies the dataset package's
// ImageSource interface.
type Source struct {
	World *World
	Spec  Spec
	// Size is the image side in pixels; 0 means the world's default.
	Size int
}

// Load renders the sample.
func (s Source) Load() (image.Image, error) {
	if s.World == nil {
		return nil, fmt.Errorf("world: source %s: no world", s.Spec.Key())
	}
	return s.World.Render(s.Spec, s.Size)
}

// Pair is one pretraining (image, caption) pair. The image is rendered when
// Source.Load is called.
type Pair struct {
	Spec    Spec
	Caption string
	Detail  Detail
	Source  Source
}

// PretrainPair returns pretraining pair i (i ≥ 0): a seeded random seen
// composition in a seeded random pretraining domain, with its caption.
// Held-out compositions never occur.
func (w *World) PretrainPair(i int) (Pair, error) {
	if i < 0 {
		return Pair{}, fmt.Errorf("world: pretrain pair %d: negative index: %w", i, ErrConfig)
	}
	r := w.rng(Spec{Split: PretrainSplit, Index: i, Stream: 0x9a1e}, saltScene)
	id := w.seenIDs[r.IntN(len(w.seenIDs))]
	c, _ := CompositionAt(id)
	s := Spec{Split: PretrainSplit, Class: c, Domain: w.domains[r.IntN(len(w.domains))], Index: i}
	sc := w.scene(s)
	text, d := caption(&sc, w.rng(s, saltCaption))
	return Pair{Spec: s, Caption: text, Detail: d, Source: Source{World: w, Spec: s, Size: w.cfg.Size}}, nil
}

// Pretrain returns pretraining pairs start, start+1, …, start+n-1.
func (w *World) Pretrain(start, n int) ([]Pair, error) {
	if start < 0 || n < 0 {
		return nil, fmt.Errorf("world: pretrain [%d, %d+%d): negative range: %w", start, start, n, ErrConfig)
	}
	out := make([]Pair, n)
	for k := range out {
		p, err := w.PretrainPair(start + k)
		if err != nil {
			return nil, err
		}
		out[k] = p
	}
	return out, nil
}

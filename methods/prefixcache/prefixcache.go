// Package prefixcache computes and keeps the frozen prefixes of images:
// each image's activations at the input of the first block a method runs
// (or its final or every-token features when the image encoder is frozen
// whole), computed once per image and view and read back per batch.
package prefixcache

import (
	"context"
	"fmt"
	"image"
	"math/rand/v2"
	"sync"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/progress"
)

// Depths that cache features rather than a block's input; the methods
// package gives them to methods as methods.Features and
// methods.TokenFeatures.
const (
	// Features caches each image's final features [E].
	Features = -2
	// TokenFeatures caches every token's features after ln_post @ proj,
	// [T, E]; token 0 is the image feature.
	TokenFeatures = -3
	// Embeddings caches ln_pre's input [T, Dv], then the frozen image
	// features [E] of the image and [E] of its horizontal mirror.
	Embeddings = -4
)

// Store keeps fixed-size prefix records (one image's activations at the
// input of the first adapted block).
type Store interface {
	Put(key string, rec []float32) (int, error)
	Lookup(key string) (int, bool)
	GetBatch(idxs []int, dst []float32) error
	Len() int
	Close() error
}

// Prefixer computes frozen prefixes of images.
type Prefixer struct {
	Model     *clip.Model
	Start     int // first adapted block ℓ
	Transform preprocess.Transform
	Batch     int
	// Split keeps split records (clip.SplitRecords): block ℓ's branch input
	// ln_1(x) and its frozen output, [2, T, D] per image, instead of the
	// prefix x. Only for 1 ≤ ℓ < L.
	Split bool
}

// RecordLen is the number of floats of one image prefix: [T, D] before
// block ℓ, [E] for Features, [T, E] for TokenFeatures.
func (p *Prefixer) RecordLen() int {
	return RecordFloats(p.Model.W.Config, p.Start, p.Split)
}

// RecordFloats is the number of floats of one cached image record of a
// model of architecture cfg at depth start: [T, D] before block start (two
// of them with split records), [E] for Features, [T, E] for TokenFeatures,
// [T, D] + 2·[E] for Embeddings.
func RecordFloats(cfg clip.Config, start int, split bool) int {
	v := cfg.Vision
	switch start {
	case Features:
		return cfg.EmbedDim
	case TokenFeatures:
		return v.FeatureTokens() * cfg.EmbedDim
	case Embeddings:
		return v.Tokens()*v.Width + 2*cfg.EmbedDim
	}
	if split {
		return clip.SplitLen(v.Tokens(), v.Width)
	}
	return v.Tokens() * v.Width
}

// Compute writes the records of B preprocessed images (pixels [B, 3, S, S])
// into dst (grown as needed) and returns it.
func (p *Prefixer) Compute(pixels []float32, B int, dst []float32) []float32 {
	if p.Split {
		return clip.ImageSplitRecords(p.Model, p.Start, pixels, B, dst)
	}
	return ImageRecords(p.Model, p.Start, pixels, B, dst)
}

// ImageRecords computes what the cache keeps of B images at depth start:
// the frozen prefix before block start (clip.ImagePrefix), the image
// features (Features) or every token's features after ln_post @ proj
// (TokenFeatures; token 0 is the image feature).
func ImageRecords(m *clip.Model, start int, pixels []float32, B int, dst []float32) []float32 {
	v := m.Vision
	E := m.W.Config.EmbedDim
	switch start {
	case Features:
		dst = nn.Grow(dst, B*E)
		if m.ResNet != nil {
			m.ResNet.Encode(dst, pixels, B)
			return dst
		}
		v.Encode(dst, pixels, B)
		return dst
	case TokenFeatures:
		if m.ResNet != nil { // the attention pool's every-token output (PLOT's)
			dst = nn.Grow(dst, B*m.ResNet.Tokens()*E)
			m.ResNet.EncodeTokens(dst, pixels, B)
			return dst
		}
		T := v.Cfg.Tokens()
		x0 := v.EmbedForward(pixels, B)
		out := v.Stack.Forward(x0, B, T, 0, len(v.Stack.Blocks), nil, false)
		dst = nn.Grow(dst, B*T*E)
		v.HeadForward(dst, out, B*T)
		return dst
	case Embeddings:
		return embeddingRecords(m, pixels, B, dst)
	}
	return clip.ImagePrefix(m, start, pixels, B, dst)
}

// embeddingRecords writes the Embeddings records of B images: ln_pre's
// input [T, Dv], the frozen features [E] and the frozen features of the
// horizontal mirror [E], per image.
func embeddingRecords(m *clip.Model, pixels []float32, B int, dst []float32) []float32 {
	v := m.Vision
	c := m.W.Config.Vision
	E, S := m.W.Config.EmbedDim, c.ImageSize
	TD := c.Tokens() * c.Width
	n := TD + 2*E
	dst = nn.Grow(dst, B*n)
	v.EmbedForward(pixels, B)
	x := v.EmbedInput()
	for b := 0; b < B; b++ {
		copy(dst[b*n:b*n+TD], x[b*TD:(b+1)*TD])
	}
	feat := make([]float32, B*E)
	v.Encode(feat, pixels, B)
	// mirror[b, ch, y, x] = pixels[b, ch, y, S−1−x]
	mirror := make([]float32, B*3*S*S)
	for r := 0; r < B*3*S; r++ {
		src, out := pixels[r*S:(r+1)*S], mirror[r*S:(r+1)*S]
		for i := range out {
			out[i] = src[S-1-i]
		}
	}
	flipped := make([]float32, B*E)
	v.Encode(flipped, mirror, B)
	for b := 0; b < B; b++ {
		copy(dst[b*n+TD:b*n+TD+E], feat[b*E:(b+1)*E])
		copy(dst[b*n+TD+E:(b+1)*n], flipped[b*E:(b+1)*E])
	}
	return dst
}

// View names one preprocessed version of an item: view 0 of an eval
// transform is the center crop; augmented views are seeded per item.
type View struct {
	// Item indexes the items the view is of.
	Item int
	// Index numbers the augmented views of an item (it seeds the
	// augmentation).
	Index int
	// Augment selects the training transform; false: the eval transform.
	Augment bool
}

func (v View) key(items []dataset.Item) string {
	if !v.Augment {
		return items[v.Item].Key
	}
	return fmt.Sprintf("%s#aug%d", items[v.Item].Key, v.Index)
}

// Pixels loads and preprocesses one view into dst [3, S, S].
func (p *Prefixer) Pixels(items []dataset.Item, v View, seed uint64, dst []float32) error {
	img, err := items[v.Item].Source.Load()
	if err != nil {
		return fmt.Errorf("image %q: %w", items[v.Item].Key, err)
	}
	return p.pixelsOf(img, v, seed, dst)
}

func (p *Prefixer) pixelsOf(img image.Image, v View, seed uint64, dst []float32) error {
	var px []float32
	if v.Augment {
		rng := rand.New(rand.NewPCG(seed, uint64(v.Item)<<20|uint64(v.Index)))
		px = p.Transform.Augment(img, rng)
	} else {
		px = p.Transform.Eval(img)
	}
	if len(px) != len(dst) {
		return fmt.Errorf("preprocessing produced %d values, want %d", len(px), len(dst))
	}
	copy(dst, px)
	return nil
}

// Fill computes the prefix of every view not yet in store and returns the
// record index of each view (in the order given). Decoding and
// preprocessing of the next batch overlap with the model's work on the
// current one.
func (p *Prefixer) Fill(ctx context.Context, items []dataset.Item, views []View, seed uint64, store Store, bar *progress.Bar) ([]int, error) {
	out := make([]int, len(views))
	var todo []int
	for i, v := range views {
		if r, ok := store.Lookup(v.key(items)); ok {
			out[i] = r
		} else {
			todo = append(todo, i)
		}
	}
	S := p.Model.W.Config.Vision.ImageSize
	per := 3 * S * S
	B := max(p.Batch, 1)
	type batch struct {
		idx []int
		px  []float32
		err error
	}
	prepare := func(idx []int) batch {
		b := batch{idx: idx, px: make([]float32, len(idx)*per)}
		var mu sync.Mutex
		nn.ParallelFor(len(idx), 1, func(lo, hi int) {
			for k := lo; k < hi; k++ {
				if err := p.Pixels(items, views[idx[k]], seed, b.px[k*per:(k+1)*per]); err != nil {
					mu.Lock()
					b.err = err
					mu.Unlock()
					return
				}
			}
		})
		return b
	}
	next := make(chan batch, 1)
	go func() {
		defer close(next)
		for s := 0; s < len(todo); s += B {
			if ctx.Err() != nil {
				return
			}
			next <- prepare(todo[s:min(s+B, len(todo))])
		}
	}()
	var rec []float32
	for b := range next {
		if b.err != nil {
			drain(next)
			return nil, b.err
		}
		if err := ctx.Err(); err != nil {
			drain(next)
			return nil, err
		}
		rec = p.Compute(b.px, len(b.idx), rec)
		n := p.RecordLen()
		for k, vi := range b.idx {
			r, err := store.Put(views[vi].key(items), rec[k*n:(k+1)*n])
			if err != nil {
				drain(next)
				return nil, err
			}
			out[vi] = r
		}
		if bar != nil {
			bar.AddItems(len(b.idx), len(b.idx))
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func drain[T any](c chan T) {
	for range c {
	}
}

// Uncached is the cache switched off: every GetBatch recomputes the
// prefixes from the images (the reference's behaviour without augmentation).
// Records are views registered with Add. A record is computed within the
// same batch of views as Prefixer.Fill would compute it (registered views
// in chunks of Prefixer.Batch), so it is bit-identical to the cached record
// whatever GEMM kernel runs: BLAS results may depend on the matrix shapes.
type Uncached struct {
	p     *Prefixer
	items []dataset.Item
	views []View
	seed  uint64
	px    []float32
	// chunk holds the prefixes of chunk number chunkAt (-1: none).
	chunk   []float32
	chunkAt int
}

// NewUncached returns an Uncached store of views of items, augmented
// views seeded with seed.
func NewUncached(p *Prefixer, items []dataset.Item, seed uint64) *Uncached {
	return &Uncached{p: p, items: items, seed: seed, chunkAt: -1}
}

// Add registers a view and returns its record index.
func (s *Uncached) Add(v View) int { s.views = append(s.views, v); return len(s.views) - 1 }

// Put implements Store: an uncached store cannot store.
func (s *Uncached) Put(key string, rec []float32) (int, error) {
	return 0, fmt.Errorf("prefix store: the uncached store computes records and cannot store %q", key)
}

// Lookup implements Store: no key is stored.
func (s *Uncached) Lookup(string) (int, bool) { return 0, false }

// Len implements Store: the number of registered views.
func (s *Uncached) Len() int { return len(s.views) }

// Close implements Store.
func (s *Uncached) Close() error { return nil }

// GetBatch implements Store: it computes the records' chunks.
func (s *Uncached) GetBatch(idxs []int, dst []float32) error {
	n := s.p.RecordLen()
	B := max(s.p.Batch, 1)
	for k, idx := range idxs {
		if idx < 0 || idx >= len(s.views) {
			return fmt.Errorf("prefix store: record %d outside 0..%d", idx, len(s.views)-1)
		}
		if c := idx / B; c != s.chunkAt {
			if err := s.compute(c*B, min(c*B+B, len(s.views))); err != nil {
				return err
			}
			s.chunkAt = c
		}
		off := idx % B
		copy(dst[k*n:(k+1)*n], s.chunk[off*n:(off+1)*n])
	}
	return nil
}

// compute runs the prefix of views lo..hi-1 as one batch.
func (s *Uncached) compute(lo, hi int) error {
	S := s.p.Model.W.Config.Vision.ImageSize
	per := 3 * S * S
	s.px = nn.Grow(s.px, (hi-lo)*per)
	errs := make([]error, hi-lo)
	nn.ParallelFor(hi-lo, 1, func(a, b int) {
		for k := a; k < b; k++ {
			errs[k] = s.p.Pixels(s.items, s.views[lo+k], s.seed, s.px[k*per:(k+1)*per])
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	s.chunk = s.p.Compute(s.px[:(hi-lo)*per], hi-lo, s.chunk)
	return nil
}

// Package world generates a deterministic vision-language world: captioned
// images of compositional objects (colour × pattern × shape) drawn in four
// rendering styles, with a seeded set of held-out compositions that never
// appear in pretraining.
//
// Every image is a pure function of (world seed, stream seed, split, class,
// domain, index), so samples are regenerated on demand instead of stored.
package world

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// Config configures a World. The zero value is not useful; start from
// DefaultConfig.
type Config struct {
	// Seed drives the choice of held-out compositions and every image.
	Seed uint64
	// HoldoutFraction is the fraction of compositions, in [0, 0.5], kept out
	// of pretraining when HeldOut is nil.
	HoldoutFraction float64
	// HeldOut, when non-nil, lists the held-out compositions explicitly and
	// overrides HoldoutFraction. Every attribute value must still occur in
	// some pretraining composition.
	HeldOut []Composition
	// Size is the default image side in pixels, in [8, 1024].
	Size int
	// MaxClutter is the largest number of background distractors, in [0, 16].
	MaxClutter int
	// PretrainDomains are the styles Pretrain draws from; nil means all.
	PretrainDomains []Domain
}

// DefaultConfig returns the default configuration: 25% of compositions held
// out, 64-pixel images, up to 4 distractors, all domains in pretraining.
func DefaultConfig() Config {
	return Config{Seed: 1, HoldoutFraction: 0.25, Size: 64, MaxClutter: 4}
}

// World is a generated vision-language world. It is immutable after New and
// safe for concurrent use.
type World struct {
	cfg     Config
	held    []bool // by composition id
	heldIDs []int
	seenIDs []int
	domains []Domain // pretraining domains
}

// ErrConfig is wrapped by every configuration error New returns.
var ErrConfig = errors.New("invalid world config")

// New builds a world from cfg, choosing the held-out compositions.
func New(cfg Config) (*World, error) {
	if !(cfg.HoldoutFraction >= 0 && cfg.HoldoutFraction <= 0.5) {
		return nil, fmt.Errorf("world: holdout fraction %g not in [0, 0.5]: %w", cfg.HoldoutFraction, ErrConfig)
	}
	if cfg.Size < 8 || cfg.Size > 1024 {
		return nil, fmt.Errorf("world: image size %d (dataset.image_size) not in [8, 1024]: %w", cfg.Size, ErrConfig)
	}
	if cfg.MaxClutter < 0 || cfg.MaxClutter > 16 {
		return nil, fmt.Errorf("world: clutter %d not in [0, 16]: %w", cfg.MaxClutter, ErrConfig)
	}
	w := &World{cfg: cfg, held: make([]bool, NumCompositions)}
	if cfg.PretrainDomains == nil {
		for d := range Domain(NumDomains) {
			w.domains = append(w.domains, d)
		}
	} else {
		if len(cfg.PretrainDomains) == 0 {
			return nil, fmt.Errorf("world: the list of pretraining styles is empty: %w", ErrConfig)
		}
		for i, d := range cfg.PretrainDomains {
			if d < 0 || int(d) >= NumDomains {
				return nil, fmt.Errorf("world: pretraining style %d (number %d in the list) out of range: %w", int(d), i+1, ErrConfig)
			}
		}
		w.domains = append([]Domain(nil), cfg.PretrainDomains...)
	}
	w.cfg.PretrainDomains = append([]Domain(nil), w.domains...)
	if cfg.HeldOut != nil {
		for i, c := range cfg.HeldOut {
			if !c.valid() {
				return nil, fmt.Errorf("world: held-out composition %+v (number %d in the list) out of range: %w", c, i+1, ErrConfig)
			}
			w.held[c.ID()] = true
		}
		w.cfg.HeldOut = append([]Composition(nil), cfg.HeldOut...)
	} else {
		w.chooseHeldOut()
	}
	for id, h := range w.held {
		if h {
			w.heldIDs = append(w.heldIDs, id)
		} else {
			w.seenIDs = append(w.seenIDs, id)
		}
	}
	if err := w.checkCoverage(); err != nil {
		return nil, err
	}
	return w, nil
}

// chooseHeldOut holds out a seeded HoldoutFraction of the compositions,
// greedily, skipping any whose removal would leave an attribute value — or a
// pair of attribute values (colour+pattern, colour+shape, pattern+shape) —
// without a pretraining composition. Novel classes are thus new triples of
// familiar attributes and familiar pairs.
func (w *World) chooseHeldOut() {
	nc, np, ns := len(Colours), len(Patterns), len(Shapes)
	target := int(w.cfg.HoldoutFraction*float64(NumCompositions) + 0.5)
	// seen counts per attribute pair; a pair always implies its single values.
	cp := make([]int, nc*np)
	cs := make([]int, nc*ns)
	ps := make([]int, np*ns)
	for id := range NumCompositions {
		c, _ := CompositionAt(id)
		cp[int(c.Colour)*np+int(c.Pattern)]++
		cs[int(c.Colour)*ns+int(c.Shape)]++
		ps[int(c.Pattern)*ns+int(c.Shape)]++
	}
	r := rand.New(rand.NewPCG(mix(w.cfg.Seed, 0x401d), 0x0ff5e7))
	n := 0
	for _, id := range r.Perm(NumCompositions) {
		if n == target {
			break
		}
		c, _ := CompositionAt(id)
		a := int(c.Colour)*np + int(c.Pattern)
		b := int(c.Colour)*ns + int(c.Shape)
		d := int(c.Pattern)*ns + int(c.Shape)
		if cp[a] == 1 || cs[b] == 1 || ps[d] == 1 {
			continue
		}
		cp[a]--
		cs[b]--
		ps[d]--
		w.held[id] = true
		n++
	}
}

// checkCoverage reports an error when some attribute value has no
// pretraining composition.
func (w *World) checkCoverage() error {
	col := make([]bool, len(Colours))
	pat := make([]bool, len(Patterns))
	shp := make([]bool, len(Shapes))
	for _, id := range w.seenIDs {
		c, _ := CompositionAt(id)
		col[c.Colour], pat[c.Pattern], shp[c.Shape] = true, true, true
	}
	for i, ok := range col {
		if !ok {
			return fmt.Errorf("world: the held-out compositions leave colour %q out of pretraining: %w", Colours[i], ErrConfig)
		}
	}
	for i, ok := range pat {
		if !ok {
			return fmt.Errorf("world: the held-out compositions leave pattern %q out of pretraining: %w", Patterns[i], ErrConfig)
		}
	}
	for i, ok := range shp {
		if !ok {
			return fmt.Errorf("world: the held-out compositions leave shape %q out of pretraining: %w", Shapes[i], ErrConfig)
		}
	}
	return nil
}

// Config returns a copy of the world's configuration, with PretrainDomains
// filled in. HeldOut is as given (nil when the seed chose the held-out
// classes; the method HeldOut lists them either way).
func (w *World) Config() Config {
	c := w.cfg
	c.HeldOut = append([]Composition(nil), w.cfg.HeldOut...)
	c.PretrainDomains = append([]Domain(nil), w.domains...)
	return c
}

// Classes returns every composition, ordered by ID.
func (w *World) Classes() []Composition {
	out := make([]Composition, NumCompositions)
	for id := range out {
		out[id], _ = CompositionAt(id)
	}
	return out
}

// HeldOut returns the compositions that never appear in pretraining,
// ordered by ID.
func (w *World) HeldOut() []Composition { return compositions(w.heldIDs) }

// Seen returns the compositions pretraining draws from, ordered by ID.
func (w *World) Seen() []Composition { return compositions(w.seenIDs) }

// IsHeldOut reports whether c never appears in pretraining.
func (w *World) IsHeldOut(c Composition) bool { return c.valid() && w.held[c.ID()] }

func compositions(ids []int) []Composition {
	out := make([]Composition, len(ids))
	for i, id := range ids {
		out[i], _ = CompositionAt(id)
	}
	return out
}

// Split tells which pool a sample belongs to; the same (class, domain,
// index) in different splits gives unrelated images.
type Split int

// The splits.
const (
	PretrainSplit Split = iota
	TrainSplit
	TestSplit
)

var splitNames = [...]string{"pretrain", "train", "test"}

// String returns "pretrain", "train" or "test".
func (s Split) String() string {
	if s < 0 || int(s) >= len(splitNames) {
		return fmt.Sprintf("Split(%d)", int(s))
	}
	return splitNames[s]
}

// Spec identifies one sample. The image, scene and caption of a Spec are
// pure functions of it and the world's seed.
type Spec struct {
	Split  Split
	Class  Composition
	Domain Domain
	Index  int
	// Stream is an extra seed (for example a dataset seed) that selects an
	// independent set of images; 0 is the default stream.
	Stream uint64
}

// Key returns a stable string naming the sample, e.g.
// "train/red-striped-triangle/photo/s0/17".
func (s Spec) Key() string {
	return fmt.Sprintf("%s/%s-%s-%s/%s/s%d/%d", s.Split, s.Class.Colour, s.Class.Pattern, s.Class.Shape, s.Domain, s.Stream, s.Index)
}

func (s Spec) validate() error {
	if s.Split < 0 || int(s.Split) >= len(splitNames) {
		return fmt.Errorf("world: spec %v: split %d out of range: %w", s, int(s.Split), ErrConfig)
	}
	if !s.Class.valid() {
		return fmt.Errorf("world: spec %v: class %+v out of range: %w", s, s.Class, ErrConfig)
	}
	if s.Domain < 0 || int(s.Domain) >= NumDomains {
		return fmt.Errorf("world: spec %v: domain %d out of range: %w", s, int(s.Domain), ErrConfig)
	}
	if s.Index < 0 {
		return fmt.Errorf("world: spec %v: negative index: %w", s, ErrConfig)
	}
	return nil
}

// Random-stream salts: each sample has independent streams for its scene
// layout, its pixel noise and its caption.
const (
	saltScene   = 0x5ce7e
	saltPixels  = 0x919e15
	saltCaption = 0xca9
)

// rng returns the sample's random stream for salt.
func (w *World) rng(s Spec, salt uint64) *rand.Rand {
	h := mix(w.cfg.Seed, s.Stream)
	h = mix(h, uint64(s.Split))
	h = mix(h, uint64(s.Class.ID()))
	h = mix(h, uint64(s.Domain))
	h = mix(h, uint64(s.Index))
	return rand.New(rand.NewPCG(h, mix(h, salt)))
}

// mix folds v into the hash h (splitmix64 finaliser).
func mix(h, v uint64) uint64 {
	z := h ^ (v + 0x9e3779b97f4a7c15 + h<<6 + h>>2)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

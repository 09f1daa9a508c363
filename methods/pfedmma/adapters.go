// Package pfedmma is pFedMMA (Ghiasvand et al.): multi-modal adapters in the
// top blocks of CLIP's image and text encoders; every site trains all of its
// adapters locally, and only the small shared projections are averaged by
// the server (FedAvg weighted by n_i). Specs: shared/specs/pfedmma.md.
//
// The adapter: in each adapted block j a branch parallel to the whole block,
//
//	A_j^(o)(h) = W_u^(o) · ReLU(W_s · ReLU(W_d^(o) · h + b_d) + b_s) + b_u,   o ∈ {image, text}
//
// reads the block's ln_1 output h and adds scale·A(h) to the block output.
// The r×r projection W_s is shared by both modalities of block j and is the
// only part a client uploads; the down and up projections stay private.
// Index 0 adapts the embeddings (after ln_pre for images, the token
// embeddings for text).
package pfedmma

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Config chooses where the adapters go and how large they are.
type Config struct {
	Start int     // first adapted block, 1-based (0 also adapts the embeddings)
	End   int     // last adapted block, inclusive (the encoder depth L)
	Dim   int     // adapter width r (32 in the paper)
	Scale float32 // α, the branch's forward scale (0.005 paper, 0.001 reference config)
}

// Validate checks the configuration against encoder depth L.
func (c Config) Validate(L int) error {
	switch {
	case c.Start < 0 || c.Start > L:
		return fmt.Errorf("mma: start block %d outside 0..%d", c.Start, L)
	case c.End < c.Start || c.End > L:
		return fmt.Errorf("mma: end block %d outside %d..%d", c.End, c.Start, L)
	case c.Dim <= 0:
		return fmt.Errorf("mma: adapter dim %d must be positive", c.Dim)
	case c.Scale <= 0 || math.IsNaN(float64(c.Scale)):
		return fmt.Errorf("mma: scale %v must be positive", c.Scale)
	}
	return nil
}

// Parameter names follow the reference implementation, so adapters saved by
// pfedmma and by the authors' code can be exchanged.
const prefix = "adapter_learner."

// Name returns the reference name of a parameter:
// part is "visual_adapter", "text_adapter" or "shared_adapter"; layer is
// "down.0", "up" (for the modality adapters) or "0" (shared); field is
// "weight" or "bias".
func Name(part string, j int, layer, field string) string {
	return fmt.Sprintf("%s%s.%d.%s.%s", prefix, part, j, layer, field)
}

// IsShared reports whether a parameter name belongs to a shared projection
// (the part pFedMMA's clients upload).
func IsShared(name string) bool { return strings.Contains(name, ".shared_adapter.") }

// Adapters holds every adapter parameter and gradient of one client.
type Adapters struct {
	Cfg    Config
	Dv, Dt int          // vision and text widths
	Params tensor.Named // by reference name
	Grads  tensor.Named // same names and shapes
}

// New allocates adapters for widths dv (vision) and dt (text) and initialises
// them as the reference: weights kaiming-normal (fan_out, ReLU gain), biases
// zero, drawn from rng in a fixed order. A nil rng leaves every value zero
// (for adapters about to be loaded).
func New(cfg Config, dv, dt int, rng *rand.Rand) *Adapters {
	a := &Adapters{Cfg: cfg, Dv: dv, Dt: dt, Params: tensor.Named{}, Grads: tensor.Named{}}
	r := cfg.Dim
	add := func(name string, shape ...int) {
		a.Params[name] = tensor.New(shape...)
		a.Grads[name] = tensor.New(shape...)
		if rng != nil && strings.HasSuffix(name, ".weight") {
			std := math.Sqrt(2) / math.Sqrt(float64(shape[0])) // fan_out = out features
			for i := range a.Params[name].Data {
				a.Params[name].Data[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
	for j := cfg.Start; j <= cfg.End; j++ {
		add(Name("visual_adapter", j, "down.0", "weight"), r, dv)
		add(Name("visual_adapter", j, "down.0", "bias"), r)
		add(Name("visual_adapter", j, "up", "weight"), dv, r)
		add(Name("visual_adapter", j, "up", "bias"), dv)
		add(Name("text_adapter", j, "down.0", "weight"), r, dt)
		add(Name("text_adapter", j, "down.0", "bias"), r)
		add(Name("text_adapter", j, "up", "weight"), dt, r)
		add(Name("text_adapter", j, "up", "bias"), dt)
		add(Name("shared_adapter", j, "0", "weight"), r, r)
		add(Name("shared_adapter", j, "0", "bias"), r)
	}
	return a
}

// Names returns the parameter names in a fixed (sorted) order.
func (a *Adapters) Names() []string {
	names := make([]string, 0, len(a.Params))
	for n := range a.Params {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Load replaces parameter values from src (for example a checkpoint or the
// fixture's initial adapters). Every parameter must be present with its
// shape; extra tensors are an error, so a mismatched file is caught.
func (a *Adapters) Load(src tensor.Named) error {
	for name, p := range a.Params {
		s, ok := src[name]
		if !ok {
			return fmt.Errorf("mma: adapter tensor %q missing", name)
		}
		if !tensor.SameShape(s.Shape, p.Shape) {
			return fmt.Errorf("mma: adapter tensor %q has shape %v, want %v", name, s.Shape, p.Shape)
		}
	}
	for name := range src {
		if _, ok := a.Params[name]; !ok {
			return fmt.Errorf("mma: unexpected adapter tensor %q (not in blocks %d..%d)", name, a.Cfg.Start, a.Cfg.End)
		}
	}
	for name, p := range a.Params {
		copy(p.Data, src[name].Data)
	}
	return nil
}

// ZeroGrads clears every gradient.
func (a *Adapters) ZeroGrads() {
	for _, g := range a.Grads {
		clear(g.Data)
	}
}

// Count returns the number of trainable values (weights and biases) and of
// shared values.
func (a *Adapters) Count() (total, shared int) {
	for name, p := range a.Params {
		total += p.Len()
		if IsShared(name) {
			shared += p.Len()
		}
	}
	return total, shared
}

// linear is one affine layer of an adapter: its weight, bias and gradients.
type linear struct {
	w, b, gw, gb []float32
	in, out      int
}

func (a *Adapters) linear(part string, j int, layer string, in, out int) linear {
	wn, bn := Name(part, j, layer, "weight"), Name(part, j, layer, "bias")
	return linear{w: a.Params[wn].Data, b: a.Params[bn].Data, gw: a.Grads[wn].Data, gb: a.Grads[bn].Data, in: in, out: out}
}

// Branch returns the adapter of block j (0 = embeddings) for one modality
// ("visual" or "text") as a clip.Adapter, keeping its activations in ws.
// Both modalities' branches of a block share the same projection parameters
// and gradient buffers.
func (a *Adapters) Branch(modality string, j int, ws *Workspace) *Branch {
	d := a.Dv
	if modality == "text" {
		d = a.Dt
	}
	part := modality + "_adapter"
	return &Branch{
		down:      a.linear(part, j, "down.0", d, a.Cfg.Dim),
		shared:    a.linear("shared_adapter", j, "0", a.Cfg.Dim, a.Cfg.Dim),
		up:        a.linear(part, j, "up", a.Cfg.Dim, d),
		scale:     a.Cfg.Scale,
		gradScale: j > 0,
		a:         ws.get(modality, j),
	}
}

// Branch is one modality's adapter in one block. It implements clip.Adapter.
//
// Gradient scaling (reference code, blocks ≥ 1): the gradient entering the
// branch output is multiplied by 1/scale and the gradient the branch sends
// back into h by scale. Forward values are unchanged; the adapter's own
// parameters see gradients as if scale were 1. The index-0 branches have no
// such scaling and see the true (scaled) gradients.
type Branch struct {
	down, shared, up linear
	scale            float32
	gradScale        bool

	a *branchActs // activations, possibly shared with other clients' branches
}

// branchActs are one branch's activations and gradient scratch.
type branchActs struct {
	h, z1, z2, y, dy, dz1, dz2, dhTmp []float32
}

// Workspace holds the activations of adapter branches. Learners that run one
// at a time (the clients of a simulation) share one workspace, so that
// activation memory does not grow with the number of clients.
type Workspace struct {
	acts map[string]*branchActs
}

// NewWorkspace returns an empty workspace.
func NewWorkspace() *Workspace { return &Workspace{acts: map[string]*branchActs{}} }

func (w *Workspace) get(modality string, j int) *branchActs {
	key := fmt.Sprintf("%s/%d", modality, j)
	a, ok := w.acts[key]
	if !ok {
		a = &branchActs{}
		w.acts[key] = a
	}
	return a
}

// Forward adds scale·A(h) to out; h and out are [N, d].
func (b *Branch) Forward(out, h []float32, N int) {
	d, r := b.down.in, b.down.out
	b.a.h = nn.Grow(b.a.h, N*d)
	copy(b.a.h, h[:N*d]) // kept for the weight gradient; h may alias out
	// z1 = ReLU(h · W_dᵀ + b_d)      [N, r]
	b.a.z1 = nn.Grow(b.a.z1, N*r)
	nn.LinearForward(b.a.z1, b.a.h, b.down.w, b.down.b, N, d, r)
	nn.ReLUForward(b.a.z1, b.a.z1, N*r)
	// z2 = ReLU(z1 · W_sᵀ + b_s)     [N, r]
	b.a.z2 = nn.Grow(b.a.z2, N*r)
	nn.LinearForward(b.a.z2, b.a.z1, b.shared.w, b.shared.b, N, r, r)
	nn.ReLUForward(b.a.z2, b.a.z2, N*r)
	// y = z2 · W_uᵀ + b_u            [N, d]
	b.a.y = nn.Grow(b.a.y, N*d)
	nn.LinearForward(b.a.y, b.a.z2, b.up.w, b.up.b, N, r, d)
	for i, v := range b.a.y {
		out[i] += b.scale * v
	}
}

// Backward takes dout [N, d], the gradient at the branch output (the block
// output), accumulates the parameter gradients and, when dh is not nil, adds
// the gradient with respect to h.
func (b *Branch) Backward(dh, dout []float32, N int) {
	d, r := b.down.in, b.down.out
	// gradient at A's output: scale·dout, times 1/scale with gradient scaling
	b.a.dy = nn.Grow(b.a.dy, N*d)
	if b.gradScale {
		copy(b.a.dy, dout[:N*d])
	} else {
		for i, v := range dout[:N*d] {
			b.a.dy[i] = b.scale * v
		}
	}
	b.a.dz2 = nn.Grow(b.a.dz2, N*r)
	clear(b.a.dz2)
	nn.LinearBackward(b.a.dz2, b.up.gw, b.up.gb, b.a.dy, b.a.z2, b.up.w, N, r, d)
	b.a.dz1 = nn.Grow(b.a.dz1, N*r)
	clear(b.a.dz1)
	reluMask(b.a.dz2, b.a.z2)
	nn.LinearBackward(b.a.dz1, b.shared.gw, b.shared.gb, b.a.dz2, b.a.z1, b.shared.w, N, r, r)
	reluMask(b.a.dz1, b.a.z1)
	if dh == nil {
		nn.LinearBackward(nil, b.down.gw, b.down.gb, b.a.dz1, b.a.h, b.down.w, N, d, r)
		return
	}
	b.a.dhTmp = nn.Grow(b.a.dhTmp, N*d)
	clear(b.a.dhTmp)
	nn.LinearBackward(b.a.dhTmp, b.down.gw, b.down.gb, b.a.dz1, b.a.h, b.down.w, N, d, r)
	s := float32(1)
	if b.gradScale {
		s = b.scale // the branch sends scale × its gradient back into h
	}
	for i, v := range b.a.dhTmp {
		dh[i] += s * v
	}
}

// reluMask zeroes the gradient g where the ReLU output z was not positive.
func reluMask(g, z []float32) {
	for i := range g {
		if z[i] <= 0 {
			g[i] = 0
		}
	}
}

package fedtpg

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Prefix is the reference name of the generator (the authors'
// prompt_learner.meta_net); every parameter name starts with it.
const Prefix = "prompt_learner.meta_net."

// Reference names of the generator's tensors (without Prefix).
const (
	nameSoftPrompt = "soft_prompt"
	nameCross      = "encoder.cross_attend_blocks.0."
	nameCrossFF    = "encoder.cross_attend_blocks.1.net."
)

// selfName is the prefix of self-attention layer i's tensors: ".0." the
// pre-norm attention, ".1.net." its feed-forward.
func selfName(i int) string { return "transformer.layers." + strconv.Itoa(i) + "." }

// GenConfig fixes the generator's shapes.
type GenConfig struct {
	NCtx       int // n_ctx: prompt vectors per depth
	DCtx       int // d_ctx: prompt depth (1: the embedding level only)
	Depth      int // self-attention layers after the cross-attention (0)
	CrossHeads int // heads of the cross-attention (4)
	SelfHeads  int // heads of each self-attention (4)
	FFMult     int // feed-forward hidden width = FFMult·E (4; GEGLU doubles the first Linear)
	E          int // prompt_dim: the text tower's width
	D          int // textemb_dim: the CLIP embedding dim (the class-name features)
}

// Queries is the number of learnable queries, n_ctx·d_ctx.
func (c GenConfig) Queries() int { return c.NCtx * c.DCtx }

// Validate names the first impossible shape.
func (c GenConfig) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("fedtpg: n_ctx %d: must be at least 1", c.NCtx)
	case c.DCtx != 1:
		return fmt.Errorf("fedtpg: d_ctx %d: only 1 is supported (the authors' deeper prompts overwrite the embedding-level vectors before block 0 and never prompt the image encoder; see the package doc)", c.DCtx)
	case c.Depth < 0:
		return fmt.Errorf("fedtpg: depth %d: must not be negative", c.Depth)
	case c.CrossHeads < 1 || c.E%c.CrossHeads != 0:
		return fmt.Errorf("fedtpg: cross_heads %d: must divide the text width %d", c.CrossHeads, c.E)
	case c.SelfHeads < 1 || c.E%c.SelfHeads != 0:
		return fmt.Errorf("fedtpg: self_heads %d: must divide the text width %d", c.SelfHeads, c.E)
	case c.FFMult < 1:
		return fmt.Errorf("fedtpg: ff_mult %d: must be at least 1", c.FFMult)
	case c.E < 1 || c.D < 1:
		return fmt.Errorf("fedtpg: widths %d and %d must be positive", c.E, c.D)
	}
	return nil
}

// Shapes returns every generator tensor's reference name (with Prefix) and
// shape. The cross-attention stores one in_proj_weight [3E, E] when the
// context is as wide as the queries (D = E, ViT-B's 512 = 512) and separate
// q/k/v projections otherwise, as torch's nn.MultiheadAttention does.
func (c GenConfig) Shapes() map[string][]int {
	E, D, F := c.E, c.D, c.FFMult*c.E
	s := map[string][]int{Prefix + nameSoftPrompt: {c.Queries(), E}}
	ln := func(p string, n int) {
		s[Prefix+p+"weight"], s[Prefix+p+"bias"] = []int{n}, []int{n}
	}
	mha := func(p string, kv int) {
		if kv == E {
			s[Prefix+p+"in_proj_weight"] = []int{3 * E, E}
		} else {
			s[Prefix+p+"q_proj_weight"], s[Prefix+p+"k_proj_weight"], s[Prefix+p+"v_proj_weight"] = []int{E, E}, []int{E, kv}, []int{E, kv}
		}
		s[Prefix+p+"in_proj_bias"] = []int{3 * E}
		s[Prefix+p+"out_proj.weight"], s[Prefix+p+"out_proj.bias"] = []int{E, E}, []int{E}
	}
	ff := func(p string) {
		ln(p+"0.", E)
		s[Prefix+p+"1.weight"], s[Prefix+p+"1.bias"] = []int{2 * F, E}, []int{2 * F}
		s[Prefix+p+"3.weight"], s[Prefix+p+"3.bias"] = []int{E, F}, []int{E}
	}
	ln(nameCross+"norm.", E)
	ln(nameCross+"norm_context.", D)
	mha(nameCross+"fn.", D)
	ff(nameCrossFF)
	for i := 0; i < c.Depth; i++ {
		ln(selfName(i)+"0.norm.", E)
		mha(selfName(i)+"0.fn.", E)
		ff(selfName(i) + "1.net.")
	}
	return s
}

// InitParams draws the authors' initialisation from rng: soft_prompt
// N(0, std²); LayerNorm weights 1 and biases 0; the attention projections
// Xavier-uniform over the stored matrix, their biases 0; out_proj and the
// feed-forward Linears torch's default, U(±1/√fan_in) for weight and bias.
// (Their meta_net.half() then rounds the values to float16; the masters
// here stay float32.)
func (c GenConfig) InitParams(std float64, rng *rand.Rand) tensor.Named {
	shapes := c.Shapes()
	p := tensor.Named{}
	uniform := func(t *tensor.Tensor, bound float64) {
		for i := range t.Data {
			t.Data[i] = float32((rng.Float64()*2 - 1) * bound)
		}
	}
	// sorted order: a deterministic draw
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		t := tensor.New(shapes[name]...)
		p[name] = t
		short := name[len(Prefix):]
		switch {
		case short == nameSoftPrompt:
			for i := range t.Data {
				t.Data[i] = float32(rng.NormFloat64() * std)
			}
		case strings.HasSuffix(short, "norm.weight"), strings.HasSuffix(short, "norm_context.weight"), strings.HasSuffix(short, "net.0.weight"):
			for i := range t.Data {
				t.Data[i] = 1
			}
		case strings.HasSuffix(short, "_proj_weight"): // Xavier over [out, in]
			uniform(t, math.Sqrt(6/float64(t.Shape[0]+t.Shape[1])))
		case strings.HasSuffix(short, "out_proj.weight"), strings.HasSuffix(short, "net.1.weight"), strings.HasSuffix(short, "net.3.weight"):
			uniform(t, 1/math.Sqrt(float64(t.Shape[1])))
		case strings.HasSuffix(short, "net.1.bias"), strings.HasSuffix(short, "net.3.bias"):
			in := shapes[name[:len(name)-len("bias")]+"weight"][1]
			uniform(t, 1/math.Sqrt(float64(in)))
		}
		// every other tensor (LayerNorm and attention biases) stays 0
	}
	return p
}

// Generator is the authors' PromptTranslator: learnable queries
// cross-attend to the class names' text features, then feed-forward (and
// optional self-attention) layers:
//
//	q  = LN(soft_prompt)                            [Q, E]   Q = n_ctx·d_ctx
//	kv = LN_ctx(T)                                  [K, D]   T: class-name features
//	a  = MHA(q, kv, kv)                             [Q, E]   no residual
//	x  = a + FF(a)                                  [Q, E]
//	per self-attention layer: h = LN(x); x = x + MHA(h, h, h); x = x + FF(x)
//	ctx = x                                         [Q, E]
//
// with FF(x) = W₃·(u₁ ⊙ GELU(u₂)) + b₃, [u₁ | u₂] = W₁·LN(x) + b₁. It reads
// its parameters from a tensor.Named (views, no copy) and writes their
// gradients into another; it keeps the activations of the last Forward for
// Backward. Not safe for concurrent use.
type Generator struct {
	Cfg GenConfig

	norm, normCtx layerNorm
	cross         attention
	crossFF       feedForward
	layers        []selfLayer
	soft, gsoft   []float32
	x             []float32 // [Q, E] a + FF(a)
	out           []float32 // [Q, E] output of the last Forward
	dq            []float32 // [Q, E] scratch
}

// selfLayer is one pre-norm self-attention layer with its feed-forward.
type selfLayer struct {
	norm   layerNorm
	attn   attention
	ff     feedForward
	x0, x1 []float32 // [Q, E] layer input, after the attention residual
	x2     []float32 // [Q, E] layer output
	dx     []float32 // [Q, E] scratch
}

// NewGenerator binds a generator to parameters p and gradients g (both
// holding every tensor of cfg.Shapes()).
func NewGenerator(cfg GenConfig, p, g tensor.Named) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for name, shape := range cfg.Shapes() {
		for _, set := range []tensor.Named{p, g} {
			t, ok := set[name]
			if !ok || !tensor.SameShape(t.Shape, shape) {
				return nil, fmt.Errorf("fedtpg: generator tensor %q of shape %v missing", name, shape)
			}
		}
	}
	gen := &Generator{Cfg: cfg, soft: p[Prefix+nameSoftPrompt].Data, gsoft: g[Prefix+nameSoftPrompt].Data}
	gen.norm = newLayerNorm(p, g, nameCross+"norm.", cfg.E)
	gen.normCtx = newLayerNorm(p, g, nameCross+"norm_context.", cfg.D)
	gen.cross = newAttention(p, g, nameCross+"fn.", cfg.E, cfg.D, cfg.CrossHeads)
	gen.crossFF = newFeedForward(p, g, nameCrossFF, cfg.E, cfg.FFMult*cfg.E)
	for i := 0; i < cfg.Depth; i++ {
		gen.layers = append(gen.layers, selfLayer{
			norm: newLayerNorm(p, g, selfName(i)+"0.norm.", cfg.E),
			attn: newAttention(p, g, selfName(i)+"0.fn.", cfg.E, cfg.E, cfg.SelfHeads),
			ff:   newFeedForward(p, g, selfName(i)+"1.net.", cfg.E, cfg.FFMult*cfg.E),
		})
	}
	return gen, nil
}

// Forward generates the prompt vectors [Q, E] from the class-name
// features text [K, D] (owned by the generator, valid until the next
// Forward).
func (g *Generator) Forward(text []float32, K int) []float32 {
	Q, E := g.Cfg.Queries(), g.Cfg.E
	q := g.norm.forward(g.soft, Q)    // [Q, E]
	kv := g.normCtx.forward(text, K)  // [K, D]
	a := g.cross.forward(q, Q, kv, K) // [Q, E]
	f := g.crossFF.forward(a, Q)      // [Q, E]
	g.x = nn.Grow(g.x, Q*E)           // x = a + FF(a)
	for i := range g.x[:Q*E] {
		g.x[i] = a[i] + f[i]
	}
	x := g.x[:Q*E]
	for i := range g.layers {
		x = g.layers[i].forward(x, Q, E)
	}
	g.out = x
	return x
}

// Output returns the prompt vectors of the last Forward [Q, E].
func (g *Generator) Output() []float32 { return g.out }

// CrossAttention returns the cross-attention weights of the last Forward
// averaged over the heads, [Q, K] (what torch's MultiheadAttention returns).
func (g *Generator) CrossAttention() []float32 { return g.cross.headMean() }

// CrossOut returns the cross-attention output a of the last Forward [Q, E].
func (g *Generator) CrossOut() []float32 { return g.cross.out[:g.cross.nq*g.Cfg.E] }

// Backward takes dctx [Q, E], the gradient with respect to the last
// Forward's output, and overwrites the parameter gradients. The class-name
// features get no gradient (the reference computes them under no_grad).
func (g *Generator) Backward(dctx []float32) {
	Q, E := g.Cfg.Queries(), g.Cfg.E
	g.zeroGrads()
	dx := dctx[:Q*E]
	for i := len(g.layers) - 1; i >= 0; i-- {
		dx = g.layers[i].backward(dx, Q, E)
	}
	// x = a + FF(a): da = dx + FF'ᵀ·dx
	da := g.crossFF.backward(dx)
	for i := range da {
		da[i] += dx[i]
	}
	dq, dkv := g.cross.backward(da, true)
	g.normCtx.backward(nil, dkv) // LN_ctx's weight and bias; T itself is constant
	g.dq = nn.Grow(g.dq, Q*E)
	clear(g.dq)
	g.norm.backward(g.dq, dq)
	for i, v := range g.dq[:Q*E] {
		g.gsoft[i] += v
	}
}

func (g *Generator) zeroGrads() {
	clear(g.gsoft)
	for _, l := range []*layerNorm{&g.norm, &g.normCtx} {
		l.zero()
	}
	g.cross.zero()
	g.crossFF.zero()
	for i := range g.layers {
		g.layers[i].norm.zero()
		g.layers[i].attn.zero()
		g.layers[i].ff.zero()
	}
}

// forward: x1 = x0 + MHA(h, h, h) with h = LN(x0); x2 = x1 + FF(x1).
//
//	x0: [Q, E] → x2: [Q, E]
func (l *selfLayer) forward(x0 []float32, Q, E int) []float32 {
	l.x0 = x0
	h := l.norm.forward(x0, Q)
	a := l.attn.forward(h, Q, h, Q)
	l.x1 = nn.Grow(l.x1, Q*E)
	for i := range l.x1[:Q*E] {
		l.x1[i] = x0[i] + a[i]
	}
	f := l.ff.forward(l.x1[:Q*E], Q)
	l.x2 = nn.Grow(l.x2, Q*E)
	for i := range l.x2[:Q*E] {
		l.x2[i] = l.x1[i] + f[i]
	}
	return l.x2[:Q*E]
}

// backward takes dx2 [Q, E] and returns dx0 [Q, E] (owned by the layer).
func (l *selfLayer) backward(dx2 []float32, Q, E int) []float32 {
	dx1 := l.ff.backward(dx2) // FF'ᵀ·dx2, then + dx2 (residual)
	for i := range dx1 {
		dx1[i] += dx2[i]
	}
	dq, dkv := l.attn.backward(dx1, true) // query, key and value are all h
	for i := range dq {
		dq[i] += dkv[i]
	}
	l.dx = nn.Grow(l.dx, Q*E)
	copy(l.dx, dx1) // residual
	l.norm.backward(l.dx[:Q*E], dq)
	return l.dx[:Q*E]
}

// layerNorm is torch.nn.LayerNorm over the last axis (ε 1e-5).
type layerNorm struct {
	w, b, gw, gb []float32 // [C]
	C, n         int
	x, out       []float32 // [n, C]
	mean, rstd   []float32 // [n]
}

func newLayerNorm(p, g tensor.Named, name string, C int) layerNorm {
	return layerNorm{w: p[Prefix+name+"weight"].Data, b: p[Prefix+name+"bias"].Data,
		gw: g[Prefix+name+"weight"].Data, gb: g[Prefix+name+"bias"].Data, C: C}
}

// forward normalises the rows of x [n, C] (kept by reference) into out [n, C].
func (l *layerNorm) forward(x []float32, n int) []float32 {
	l.x, l.n = x, n
	l.out, l.mean, l.rstd = nn.Grow(l.out, n*l.C), nn.Grow(l.mean, n), nn.Grow(l.rstd, n)
	nn.LayerNormForward(l.out, l.mean, l.rstd, x, l.w, l.b, n, l.C)
	return l.out[:n*l.C]
}

// backward accumulates dx [n, C] += ∂/∂x (dx may be nil) and the weight
// and bias gradients for dout [n, C].
func (l *layerNorm) backward(dx, dout []float32) {
	nn.LayerNormBackward(dx, l.gw, l.gb, dout, l.x, l.mean, l.rstd, l.w, l.n, l.C)
}

func (l *layerNorm) zero() { clear(l.gw); clear(l.gb) }

// linear is torch.nn.Linear: out = x·Wᵀ + b.
type linear struct {
	w, b, gw, gb []float32 // [OC, IC], [OC]
	IC, OC, n    int
	x, out, dx   []float32 // [n, IC], [n, OC], [n, IC]
}

// forward: x [n, IC] (kept by reference) → out [n, OC].
func (l *linear) forward(x []float32, n int) []float32 {
	l.x, l.n = x, n
	l.out = nn.Grow(l.out, n*l.OC)
	nn.LinearForward(l.out, x, l.w, l.b, n, l.IC, l.OC)
	return l.out[:n*l.OC]
}

// backward accumulates the weight and bias gradients for dout [n, OC] and
// returns dx [n, IC] (owned by the layer; nil when input is false).
func (l *linear) backward(dout []float32, input bool) []float32 {
	var dx []float32
	if input {
		l.dx = nn.Grow(l.dx, l.n*l.IC)
		dx = l.dx[:l.n*l.IC]
		clear(dx)
	}
	nn.LinearBackward(dx, l.gw, l.gb, dout, l.x, l.w, l.n, l.IC, l.OC)
	return dx
}

func (l *linear) zero() { clear(l.gw); clear(l.gb) }

// attention is torch's nn.MultiheadAttention for one sequence (batch 1, no
// mask, no dropout): queries from xq [nq, E], keys and values from
// xkv [nk, Dkv],
//
//	q = xq·Wqᵀ + bq, k = xkv·Wkᵀ + bk, v = xkv·Wvᵀ + bv     [nq|nk, E]
//	P_h = softmax(q_h·k_hᵀ / √(E/H))                        [H, nq, nk]
//	out = concat_h(P_h·v_h)·Woᵀ + bo                        [nq, E]
//
// Wq, Wk, Wv are views into in_proj_weight (D = E) or the separate
// q/k/v_proj_weight tensors; bq|bk|bv into in_proj_bias.
type attention struct {
	E, Dkv, H     int
	pq, pk, pv    linear
	po            linear
	nq, nk        int
	probs         []float32 // [H, nq, nk]
	heads         []float32 // [nq, E] concat_h(P_h·v_h)
	out           []float32 // [nq, E]
	dq, dk, dv    []float32 // [nq|nk, E]
	scratch, mean []float32
}

func newAttention(p, g tensor.Named, name string, E, Dkv, H int) attention {
	bias, gbias := p[Prefix+name+"in_proj_bias"].Data, g[Prefix+name+"in_proj_bias"].Data
	var w, gw [3][]float32
	if t, ok := p[Prefix+name+"in_proj_weight"]; ok {
		gt := g[Prefix+name+"in_proj_weight"].Data
		for i := range w {
			w[i], gw[i] = t.Data[i*E*E:(i+1)*E*E], gt[i*E*E:(i+1)*E*E]
		}
	} else {
		for i, s := range []string{"q", "k", "v"} {
			w[i], gw[i] = p[Prefix+name+s+"_proj_weight"].Data, g[Prefix+name+s+"_proj_weight"].Data
		}
	}
	a := attention{E: E, Dkv: Dkv, H: H}
	for i, l := range []*linear{&a.pq, &a.pk, &a.pv} {
		*l = linear{w: w[i], gw: gw[i], b: bias[i*E : (i+1)*E], gb: gbias[i*E : (i+1)*E], IC: Dkv, OC: E}
	}
	a.pq.IC = E
	a.po = linear{w: p[Prefix+name+"out_proj.weight"].Data, b: p[Prefix+name+"out_proj.bias"].Data,
		gw: g[Prefix+name+"out_proj.weight"].Data, gb: g[Prefix+name+"out_proj.bias"].Data, IC: E, OC: E}
	return a
}

func (a *attention) shape() nn.AttentionShape {
	return nn.AttentionShape{B: 1, Tq: a.nq, Tk: a.nk, H: a.H, Dh: a.E / a.H, QStride: a.E, KVStride: a.E}
}

// forward: xq [nq, E], xkv [nk, Dkv] (kept by reference) → out [nq, E].
func (a *attention) forward(xq []float32, nq int, xkv []float32, nk int) []float32 {
	a.nq, a.nk = nq, nk
	q := a.pq.forward(xq, nq)
	k := a.pk.forward(xkv, nk)
	v := a.pv.forward(xkv, nk)
	a.probs = nn.Grow(a.probs, a.H*nq*nk)
	a.heads = nn.Grow(a.heads, nq*a.E)
	nn.AttentionForward(a.heads, a.probs, q, k, v, a.shape(), nn.Mask{})
	a.out = a.po.forward(a.heads[:nq*a.E], nq)
	return a.out
}

// backward accumulates the projections' gradients for dout [nq, E] and
// returns dxq [nq, E] and, when kv is set, dxkv [nk, Dkv] (owned by the
// layer).
func (a *attention) backward(dout []float32, kv bool) (dxq, dxkv []float32) {
	nq, nk, E := a.nq, a.nk, a.E
	dheads := a.po.backward(dout, true)
	a.dq, a.dk, a.dv = nn.Grow(a.dq, nq*E), nn.Grow(a.dk, nk*E), nn.Grow(a.dv, nk*E)
	clear(a.dq[:nq*E])
	clear(a.dk[:nk*E])
	clear(a.dv[:nk*E])
	a.scratch = nn.Grow(a.scratch, a.H*nq*nk)
	nn.AttentionBackward(a.dq, a.dk, a.dv, dheads, a.probs, a.pq.out, a.pk.out, a.pv.out, a.scratch, a.shape())
	dxq = a.pq.backward(a.dq[:nq*E], true)
	dxk := a.pk.backward(a.dk[:nk*E], kv)
	dxv := a.pv.backward(a.dv[:nk*E], kv)
	if kv {
		for i := range dxk {
			dxk[i] += dxv[i]
		}
		dxkv = dxk
	}
	return dxq, dxkv
}

// headMean returns the attention weights averaged over the heads [nq, nk].
func (a *attention) headMean() []float32 {
	n := a.nq * a.nk
	a.mean = nn.Grow(a.mean, n)
	clear(a.mean[:n])
	for h := 0; h < a.H; h++ {
		for i, p := range a.probs[h*n : (h+1)*n] {
			a.mean[i] += p / float32(a.H)
		}
	}
	return a.mean[:n]
}

func (a *attention) zero() {
	for _, l := range []*linear{&a.pq, &a.pk, &a.pv, &a.po} {
		l.zero()
	}
}

// feedForward is the authors' FeedForward without its residual:
//
//	FF(x) = W₃·GEGLU(W₁·LN(x) + b₁) + b₃      x: [n, E] → [n, E]
//
// with GEGLU([u₁ | u₂]) = u₁ ⊙ GELU_erf(u₂) (u₁ the first F of 2F columns).
type feedForward struct {
	ln     layerNorm
	l1, l3 linear
	F, n   int
	g      []float32 // [n, F] GEGLU output
	du     []float32 // [n, 2F]
	dx     []float32 // [n, E]
}

func newFeedForward(p, g tensor.Named, name string, E, F int) feedForward {
	lin := func(i string, IC, OC int) linear {
		return linear{w: p[Prefix+name+i+".weight"].Data, b: p[Prefix+name+i+".bias"].Data,
			gw: g[Prefix+name+i+".weight"].Data, gb: g[Prefix+name+i+".bias"].Data, IC: IC, OC: OC}
	}
	return feedForward{ln: newLayerNorm(p, g, name+"0.", E), l1: lin("1", E, 2*F), l3: lin("3", F, E), F: F}
}

// forward: x [n, E] (kept by reference) → FF(x) [n, E].
func (f *feedForward) forward(x []float32, n int) []float32 {
	f.n = n
	h := f.ln.forward(x, n)
	u := f.l1.forward(h, n)
	f.g = nn.Grow(f.g, n*f.F)
	gegluForward(f.g, u, n, f.F)
	return f.l3.forward(f.g[:n*f.F], n)
}

// backward accumulates the parameter gradients for dout [n, E] and returns
// dx [n, E] (owned by the layer).
func (f *feedForward) backward(dout []float32) []float32 {
	n, E := f.n, f.ln.C
	dg := f.l3.backward(dout, true)
	f.du = nn.Grow(f.du, n*2*f.F)
	gegluBackward(f.du, dg, f.l1.out, n, f.F)
	dh := f.l1.backward(f.du[:n*2*f.F], true)
	f.dx = nn.Grow(f.dx, n*E)
	clear(f.dx[:n*E])
	f.ln.backward(f.dx[:n*E], dh)
	return f.dx[:n*E]
}

func (f *feedForward) zero() { f.ln.zero(); f.l1.zero(); f.l3.zero() }

// gegluForward: out[i, j] = u[i, j] · GELU(u[i, F + j]) with the exact (erf)
// GELU.
//
//	u: [n, 2F] → out: [n, F]
func gegluForward(out, u []float32, n, F int) {
	for i := 0; i < n; i++ {
		x, gate := u[i*2*F:i*2*F+F], u[i*2*F+F:(i+1)*2*F]
		o := out[i*F : (i+1)*F]
		for j := range o {
			o[j] = x[j] * float32(gelu(float64(gate[j])))
		}
	}
}

// gegluBackward writes du [n, 2F] for dout [n, F]:
// du₁ = dout ⊙ GELU(u₂), du₂ = dout ⊙ u₁ ⊙ GELU′(u₂).
func gegluBackward(du, dout, u []float32, n, F int) {
	for i := 0; i < n; i++ {
		x, gate := u[i*2*F:i*2*F+F], u[i*2*F+F:(i+1)*2*F]
		dx, dgate := du[i*2*F:i*2*F+F], du[i*2*F+F:(i+1)*2*F]
		d := dout[i*F : (i+1)*F]
		for j := range d {
			z := float64(gate[j])
			dx[j] = d[j] * float32(gelu(z))
			dgate[j] = d[j] * x[j] * float32(geluGrad(z))
		}
	}
}

// gelu is x·Φ(x) = x/2·(1 + erf(x/√2)) (torch's F.gelu default).
func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// geluGrad is Φ(x) + x·φ(x).
func geluGrad(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

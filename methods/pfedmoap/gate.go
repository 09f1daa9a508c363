package pfedmoap

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Gate parameter names (PyTorch Linear layout: weight [out, in], bias [out]).
var gateNames = []string{
	"gating.W_q.weight", "gating.W_q.bias", "gating.W_k.weight", "gating.W_k.bias",
	"gating.W_v.weight", "gating.W_v.bias", "gating.W_o.weight", "gating.W_o.bias",
}

// Gate is pFedMoAP's attention gate: ONE multi-head attention layer of width
// D with H heads (d_k = D/H), no residual, LayerNorm, FFN or dropout, and a
// fixed score scale (the authors' 10, not 1/√d_k). For each class c the B
// queries (pooled image features) attend over the class's Ex keys = values
// (pooled text features of the local prompt and the experts):
//
//	q = query·W_qᵀ + b_q                      [B, D]
//	k = kv·W_kᵀ + b_k,  v = kv·W_vᵀ + b_v     [C·Ex, D]
//	a[c, b, h, :] = softmax_e(Scale · ⟨q[b, h], k[c, e, h]⟩)
//	o[c, b, h]    = Σ_e a[c, b, h, e] · v[c, e, h]          [C·B, D]
//	out = o·W_oᵀ + b_o                         [C, B, D]
//
// It keeps what Backward needs; gradients accumulate (+=) into G.
type Gate struct {
	D, H  int
	Scale float32
	P, G  tensor.Named // parameters and gradients by reference name

	query, kv     []float32 // inputs (copies) [B, D], [C·Ex, D]
	q, k, v       []float32
	att           []float32 // [C, B, H, Ex]
	o, out        []float32 // [C·B, D]
	avg           []float32 // head-averaged attention [C, B, Ex]
	do, dq, dk    []float32
	dv, dkv, dqry []float32
	B, C, Ex      int
}

// NewGate returns a gate of width d with h heads and score scale, its
// parameters drawn as PyTorch's Linear default (U(−1/√d, 1/√d) for weights
// and biases) from rng.
func NewGate(d, h int, scale float32, rng *rand.Rand) (*Gate, error) {
	if d < 1 || h < 1 || d%h != 0 {
		return nil, fmt.Errorf("pfedmoap: gating_embed_dim %d must be a positive multiple of gating_heads %d", d, h)
	}
	g := &Gate{D: d, H: h, Scale: scale, P: tensor.Named{}, G: tensor.Named{}}
	bound := 1 / math.Sqrt(float64(d))
	for _, name := range gateNames {
		shape := []int{d, d}
		if name[len(name)-4:] == "bias" {
			shape = []int{d}
		}
		g.P[name], g.G[name] = tensor.New(shape...), tensor.New(shape...)
		for i := range g.P[name].Data {
			g.P[name].Data[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
	return g, nil
}

func (g *Gate) w(name string) []float32  { return g.P["gating."+name].Data }
func (g *Gate) dw(name string) []float32 { return g.G["gating."+name].Data }

// Forward runs the gate for queries [B, D] and keys = values kv [C, Ex, D];
// it returns out [C, B, D] (owned by g, valid until the next Forward).
func (g *Gate) Forward(query []float32, B int, kv []float32, C, Ex int) []float32 {
	D, H := g.D, g.H
	dk := D / H
	g.B, g.C, g.Ex = B, C, Ex
	g.query = append(g.query[:0], query[:B*D]...)
	g.kv = append(g.kv[:0], kv[:C*Ex*D]...)
	g.q = nn.Grow(g.q, B*D)
	g.k, g.v = nn.Grow(g.k, C*Ex*D), nn.Grow(g.v, C*Ex*D)
	nn.LinearForward(g.q, g.query, g.w("W_q.weight"), g.w("W_q.bias"), B, D, D)
	nn.LinearForward(g.k, g.kv, g.w("W_k.weight"), g.w("W_k.bias"), C*Ex, D, D)
	nn.LinearForward(g.v, g.kv, g.w("W_v.weight"), g.w("W_v.bias"), C*Ex, D, D)
	g.att = nn.Grow(g.att, C*B*H*Ex)
	g.o = nn.Grow(g.o, C*B*D)
	clear(g.o)
	for c := 0; c < C; c++ {
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				q := g.q[b*D+h*dk : b*D+h*dk+dk]
				a := g.att[((c*B+b)*H+h)*Ex : ((c*B+b)*H+h+1)*Ex]
				mx := float32(math.Inf(-1))
				for e := 0; e < Ex; e++ {
					k := g.k[(c*Ex+e)*D+h*dk:]
					var s float32
					for j := range q {
						s += q[j] * k[j]
					}
					a[e] = g.Scale * s
					mx = max(mx, a[e])
				}
				var sum float32
				for e := range a {
					a[e] = float32(math.Exp(float64(a[e] - mx)))
					sum += a[e]
				}
				o := g.o[(c*B+b)*D+h*dk : (c*B+b)*D+h*dk+dk]
				for e := range a {
					a[e] /= sum
					v := g.v[(c*Ex+e)*D+h*dk:]
					for j := range o {
						o[j] += a[e] * v[j]
					}
				}
			}
		}
	}
	g.out = nn.Grow(g.out, C*B*D)
	nn.LinearForward(g.out, g.o, g.w("W_o.weight"), g.w("W_o.bias"), C*B, D, D)
	return g.out
}

// Attention returns the last Forward's attention averaged over heads
// [C, B, Ex] (owned by g).
func (g *Gate) Attention() []float32 {
	C, B, H, Ex := g.C, g.B, g.H, g.Ex
	g.avg = nn.Grow(g.avg, C*B*Ex)
	clear(g.avg)
	for cb := 0; cb < C*B; cb++ {
		for h := 0; h < H; h++ {
			for e := 0; e < Ex; e++ {
				g.avg[cb*Ex+e] += g.att[(cb*H+h)*Ex+e] / float32(H)
			}
		}
	}
	return g.avg
}

// Backward takes dout [C, B, D], accumulates the parameter gradients into G
// and returns the gradients with respect to the queries [B, D] and to kv
// [C, Ex, D] (both owned by g, overwritten by each call).
func (g *Gate) Backward(dout []float32) (dquery, dkv []float32) {
	D, H, B, C, Ex := g.D, g.H, g.B, g.C, g.Ex
	dk := D / H
	g.do = nn.Grow(g.do, C*B*D)
	clear(g.do)
	nn.LinearBackward(g.do, g.dw("W_o.weight"), g.dw("W_o.bias"), dout, g.o, g.w("W_o.weight"), C*B, D, D)
	g.dq = nn.Grow(g.dq, B*D)
	g.dk, g.dv = nn.Grow(g.dk, C*Ex*D), nn.Grow(g.dv, C*Ex*D)
	clear(g.dq)
	clear(g.dk)
	clear(g.dv)
	da := make([]float32, Ex)
	for c := 0; c < C; c++ {
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				a := g.att[((c*B+b)*H+h)*Ex : ((c*B+b)*H+h+1)*Ex]
				do := g.do[(c*B+b)*D+h*dk : (c*B+b)*D+h*dk+dk]
				// da_e = ⟨do, v_e⟩; dv_e += a_e·do
				var dot float32
				for e := range a {
					v := g.v[(c*Ex+e)*D+h*dk:]
					dv := g.dv[(c*Ex+e)*D+h*dk:]
					var s float32
					for j := range do {
						s += do[j] * v[j]
						dv[j] += a[e] * do[j]
					}
					da[e] = s
					dot += a[e] * s
				}
				// dscore_e = a_e (da_e − Σ a·da); scores = Scale·⟨q, k_e⟩
				q := g.q[b*D+h*dk : b*D+h*dk+dk]
				dq := g.dq[b*D+h*dk : b*D+h*dk+dk]
				for e := range a {
					ds := g.Scale * a[e] * (da[e] - dot)
					k := g.k[(c*Ex+e)*D+h*dk:]
					dkk := g.dk[(c*Ex+e)*D+h*dk:]
					for j := range q {
						dq[j] += ds * k[j]
						dkk[j] += ds * q[j]
					}
				}
			}
		}
	}
	g.dqry = nn.Grow(g.dqry, B*D)
	clear(g.dqry)
	nn.LinearBackward(g.dqry, g.dw("W_q.weight"), g.dw("W_q.bias"), g.dq, g.query, g.w("W_q.weight"), B, D, D)
	g.dkv = nn.Grow(g.dkv, C*Ex*D)
	clear(g.dkv)
	nn.LinearBackward(g.dkv, g.dw("W_k.weight"), g.dw("W_k.bias"), g.dk, g.kv, g.w("W_k.weight"), C*Ex, D, D)
	nn.LinearBackward(g.dkv, g.dw("W_v.weight"), g.dw("W_v.bias"), g.dv, g.kv, g.w("W_v.weight"), C*Ex, D, D)
	return g.dqry, g.dkv
}

// ZeroGrad clears G.
func (g *Gate) ZeroGrad() {
	for _, t := range g.G {
		clear(t.Data)
	}
}

package strategy

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	. "github.com/pfedmma/pfedmma/federation"

	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// toyClient is a per-client linear regression y ≈ w·x + b, trained with
// minibatch SGD (momentum) in float32, entirely deterministic:
//   - "shared.w" [3] is the shared parameter (uploaded),
//   - "own.v" [2] is trained toward a client-specific target and uploaded
//     only when relayOwn is set (ADAPT-style relayed tensor),
//   - "private.b" [1] and "private.mix" [1] never leave the client; mix
//     accumulates everything received besides the global, so the client's
//     state depends on the strategy's whole message.
type toyClient struct {
	id, n    int
	x        [][3]float32
	y        []float32
	params   map[string][]float32
	opt      *optim.SGD
	rng      *rand.PCG
	epochs   int
	batch    int
	lr       float64
	relayOwn bool
	leak     bool // upload private.b too (a buggy client)
}

var toyTrue = [3]float32{1, -2, 0.5}

func newToy(id int, jitter float32) *toyClient {
	n := 4 + 4*(id%3)
	c := &toyClient{
		id: id, n: n, epochs: 2, batch: 3, lr: 0.05,
		opt: optim.NewSGD(0.9, 5e-4, false),
		rng: rand.NewPCG(uint64(id), 99),
		params: map[string][]float32{
			"shared.w":    {jitter, -jitter, 0},
			"own.v":       {0, jitter},
			"private.b":   {0},
			"private.mix": {0},
		},
	}
	data := rand.New(rand.NewPCG(uint64(1000+id), 1))
	bias := float32(id)*0.3 - 0.5
	for i := 0; i < n; i++ {
		var x [3]float32
		var y float32
		for j := range x {
			x[j] = float32(data.Float64()*2 - 1)
			y += toyTrue[j] * x[j]
		}
		c.x = append(c.x, x)
		c.y = append(c.y, y+bias+float32(data.NormFloat64()*0.01))
	}
	return c
}

func (c *toyClient) ID() int          { return c.id }
func (c *toyClient) NumExamples() int { return c.n }

func sum(t tensor.Named) float32 {
	var s float32
	for _, k := range sortedNames(t) {
		for _, v := range t[k].Data {
			s += v
		}
	}
	return s
}

func (c *toyClient) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	out, m, err := c.fit(ctx, ins.Params)
	return FitRes{Params: out, NumExamples: c.n, Metrics: m}, err
}

func (c *toyClient) fit(ctx context.Context, in tensor.Named) (tensor.Named, map[string]float64, error) {
	global, experts, err := SplitExperts(in)
	if err != nil {
		return nil, nil, err
	}
	global, relayed, err := SplitRelayed(global)
	if err != nil {
		return nil, nil, err
	}
	if w, ok := global["shared.w"]; ok {
		if len(w.Data) != 3 {
			return nil, nil, fmt.Errorf("shared.w: %d values", len(w.Data))
		}
		copy(c.params["shared.w"], w.Data)
	}
	for _, e := range experts {
		c.params["private.mix"][0] += 1e-3 * sum(e)
	}
	for _, id := range sortedKeysInt(relayed) {
		c.params["private.mix"][0] += 1e-3 * sum(relayed[id])
	}
	w, b, v := c.params["shared.w"], c.params["private.b"], c.params["own.v"]
	gw, gb, gv := make([]float32, 3), make([]float32, 1), make([]float32, 2)
	params := []optim.Param{{Name: "w", Value: w, Grad: gw}, {Name: "b", Value: b, Grad: gb}, {Name: "v", Value: v, Grad: gv}}
	r := rand.New(c.rng)
	var loss float64
	var batches int
	for e := 0; e < c.epochs; e++ {
		perm := r.Perm(c.n)
		for s := 0; s < c.n; s += c.batch {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			optim.ZeroGrad(params)
			idx := perm[s:min(s+c.batch, c.n)]
			for _, i := range idx {
				pred := b[0]
				for j := range w {
					pred += w[j] * c.x[i][j]
				}
				d := pred - c.y[i]
				loss += float64(d * d)
				scale := 2 / float32(len(idx))
				for j := range w {
					gw[j] += scale * d * c.x[i][j]
				}
				gb[0] += scale * d
			}
			gv[0], gv[1] = v[0]-float32(c.id), v[1]+float32(c.id)
			batches++
			if err := c.opt.Step(c.lr, params); err != nil {
				return nil, nil, err
			}
		}
	}
	out := tensor.Named{"shared.w": {Shape: []int{3}, Data: append([]float32(nil), w...)}}
	if c.relayOwn {
		out["own.v"] = &tensor.Tensor{Shape: []int{2}, Data: append([]float32(nil), v...)}
	}
	if c.leak {
		out["private.b"] = &tensor.Tensor{Shape: []int{1}, Data: append([]float32(nil), b...)}
	}
	return out, map[string]float64{"loss": loss / float64(c.n*c.epochs), "batches": float64(batches)}, nil
}

func (c *toyClient) Evaluate(ctx context.Context, ins EvaluateIns) (EvaluateRes, error) {
	return EvaluateRes{Metrics: c.eval(), NumExamples: c.n}, nil
}

func (c *toyClient) eval() map[string]float64 {
	w, b := c.params["shared.w"], c.params["private.b"]
	var mse float64
	for i, x := range c.x {
		pred := b[0]
		for j := range w {
			pred += w[j] * x[j]
		}
		d := float64(pred - c.y[i])
		mse += d * d
	}
	return map[string]float64{"mse": mse / float64(c.n), "id": float64(c.id)}
}

func (c *toyClient) State() (tensor.Named, error) {
	st := tensor.Named{}
	for k, v := range c.params {
		st["param/"+k] = &tensor.Tensor{Shape: []int{len(v)}, Data: append([]float32(nil), v...)}
	}
	withPrefix(st, "opt/", c.opt.State())
	rb, err := c.rng.MarshalBinary()
	if err != nil {
		return nil, err
	}
	st["rng"] = BytesTensor(rb)
	return st, nil
}

func (c *toyClient) LoadState(st tensor.Named) error {
	opt := tensor.Named{}
	seen := 0
	for k, v := range st {
		switch {
		case strings.HasPrefix(k, "param/"):
			p, ok := c.params[strings.TrimPrefix(k, "param/")]
			if !ok || len(p) != len(v.Data) {
				return fmt.Errorf("toy client %d: entry %q does not fit", c.id, k)
			}
			copy(p, v.Data)
			seen++
		case strings.HasPrefix(k, "opt/"):
			opt[strings.TrimPrefix(k, "opt/")] = v
		case k == "rng":
			b, err := TensorBytes(v)
			if err != nil {
				return err
			}
			if err := c.rng.UnmarshalBinary(b); err != nil {
				return err
			}
		default:
			return fmt.Errorf("toy client %d: unexpected entry %q", c.id, k)
		}
	}
	if seen != len(c.params) {
		return fmt.Errorf("toy client %d: %d of %d params in state", c.id, seen, len(c.params))
	}
	return c.opt.LoadState(opt)
}

func sortedKeysInt[V any](m map[int]V) []int { return slices.Sorted(maps.Keys(m)) }

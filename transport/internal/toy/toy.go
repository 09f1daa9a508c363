// Package toy is a deterministic federated client for the transport's tests
// and load runs: per-client linear regression y ≈ w·x + b trained by
// minibatch SGD with momentum in float32. "shared.w" [3] is uploaded;
// "private.b" [1] never leaves the client.
package toy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// Client is the toy client. Delay slows Fit down (to kill processes
// mid-round); Poison makes it upload a NaN.
type Client struct {
	id, n  int
	x      [][3]float32
	y      []float32
	params map[string][]float32
	opt    *optim.SGD
	rng    *rand.PCG
	Delay  time.Duration
	Poison bool
}

// New makes client id.
func New(id int) *Client {
	n := 4 + 4*(id%3)
	c := &Client{
		id: id, n: n, opt: optim.NewSGD(0.9, 5e-4, false), rng: rand.NewPCG(uint64(id), 99),
		params: map[string][]float32{"shared.w": {0, 0, 0}, "private.b": {0}},
	}
	data := rand.New(rand.NewPCG(uint64(1000+id), 1))
	truth := [3]float32{1, -2, 0.5}
	bias := float32(id%7)*0.3 - 0.5
	for range n {
		var x [3]float32
		var y float32
		for j := range x {
			x[j] = float32(data.Float64()*2 - 1)
			y += truth[j] * x[j]
		}
		c.x = append(c.x, x)
		c.y = append(c.y, y+bias+float32(data.NormFloat64()*0.01))
	}
	return c
}

// Spec is what the toy clients upload.
func Spec() map[string][]int { return map[string][]int{"shared.w": {3}} }

// Strategy is the FedAvg the toy federations run.
func Strategy() *strategy.FedAvg {
	return &strategy.FedAvg{Shared: federation.Prefix("shared."), Initial: tensor.Named{"shared.w": tensor.New(3)}}
}

// ID implements federation.Client.
func (c *Client) ID() int { return c.id }

// NumExamples implements federation.Client.
func (c *Client) NumExamples() int { return c.n }

// Fit implements federation.Client: two epochs of SGD from the received
// shared.w.
func (c *Client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if c.Delay > 0 {
		select {
		case <-ctx.Done():
			return federation.FitRes{}, ctx.Err()
		case <-time.After(c.Delay):
		}
	}
	if w, ok := ins.Params["shared.w"]; ok {
		if len(w.Data) != 3 {
			return federation.FitRes{}, fmt.Errorf("toy client %d: shared.w has %d values", c.id, len(w.Data))
		}
		copy(c.params["shared.w"], w.Data)
	}
	w, b := c.params["shared.w"], c.params["private.b"]
	gw, gb := make([]float32, 3), make([]float32, 1)
	ps := []optim.Param{{Name: "w", Value: w, Grad: gw}, {Name: "b", Value: b, Grad: gb}}
	r := rand.New(c.rng)
	var loss float64
	for range 2 {
		perm := r.Perm(c.n)
		for s := 0; s < c.n; s += 3 {
			optim.ZeroGrad(ps)
			idx := perm[s:min(s+3, c.n)]
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
			if err := c.opt.Step(0.05, ps); err != nil {
				return federation.FitRes{}, err
			}
		}
	}
	out := tensor.Named{"shared.w": {Shape: []int{3}, Data: append([]float32(nil), w...)}}
	if c.Poison {
		out["shared.w"].Data[1] = float32(math.NaN())
	}
	return federation.FitRes{Params: out, NumExamples: c.n, Metrics: map[string]float64{"loss": loss / float64(2*c.n)}}, nil
}

// Evaluate implements federation.Client: mean squared error and a
// pseudo-accuracy (share of predictions within 0.25).
func (c *Client) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	w, b := c.params["shared.w"], c.params["private.b"]
	var mse, acc float64
	for i, x := range c.x {
		pred := b[0]
		for j := range w {
			pred += w[j] * x[j]
		}
		d := float64(pred - c.y[i])
		mse += d * d
		if math.Abs(d) < 0.25 {
			acc++
		}
	}
	return federation.EvaluateRes{Metrics: map[string]float64{"mse": mse / float64(c.n), "acc": acc / float64(c.n)}, NumExamples: c.n}, nil
}

// State implements federation.Client.
func (c *Client) State() (tensor.Named, error) {
	st := tensor.Named{}
	for k, v := range c.params {
		st["param/"+k] = &tensor.Tensor{Shape: []int{len(v)}, Data: append([]float32(nil), v...)}
	}
	for k, v := range c.opt.State() {
		st["opt/"+k] = v.Clone()
	}
	rb, err := c.rng.MarshalBinary()
	if err != nil {
		return nil, err
	}
	st["rng"] = federation.BytesTensor(rb)
	return st, nil
}

// LoadState implements federation.Client.
func (c *Client) LoadState(st tensor.Named) error {
	opt := tensor.Named{}
	for k, v := range st {
		switch {
		case strings.HasPrefix(k, "param/"):
			p, ok := c.params[strings.TrimPrefix(k, "param/")]
			if !ok || len(p) != len(v.Data) {
				return fmt.Errorf("toy client %d: entry %q does not fit", c.id, k)
			}
			copy(p, v.Data)
		case strings.HasPrefix(k, "opt/"):
			opt[strings.TrimPrefix(k, "opt/")] = v
		case k == "rng":
			b, err := federation.TensorBytes(v)
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
	return c.opt.LoadState(opt)
}

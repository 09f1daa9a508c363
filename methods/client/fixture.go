package client

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// FixtureRound is the parity.Rounder round of a method built on Build:
// the plain round (parity.PlainRound: the clients in federation Sites, the
// method's strategy, the Coordinator) with each client's
// "client<i>.batch_losses" (before each step), then
// "client<i>.next.<param>" for every parameter the client holds: where it
// starts the next round, the server's tensors installed by the client's own
// receive step (a Receiver site's, or the shared tensors) into its trained
// parameters. spec builds the method's Spec on the round's Env from its
// settings.
func FixtureRound(ctx context.Context, f *parity.Fixture, meth parity.Method, spec func(env *methods.Env, sec config.Section) (*Spec, error)) (tensor.Named, error) {
	var plan *methods.Plan
	losses := map[int][]float32{}
	out, err := parity.PlainRound(ctx, f, meth, func(env *methods.Env, sec config.Section) (*methods.Plan, error) {
		sp, err := spec(env, sec)
		if err != nil {
			return nil, err
		}
		if plan, err = Build(env, sp); err != nil {
			return nil, err
		}
		for _, cl := range plan.Clients {
			c := cl.(*Client)
			c.onLoss = func(loss float64) { losses[c.Task.ID] = append(losses[c.Task.ID], float32(loss)) }
		}
		return plan, nil
	})
	if err != nil {
		return nil, err
	}
	name := meth.Info().Name
	global := tensor.Named{}
	for k, t := range out {
		if g, ok := strings.CutPrefix(k, "global."); ok {
			global[g] = t
		}
	}
	if len(global) == 0 || plan == nil {
		return nil, fmt.Errorf("%s round: the server holds no global tensor", name)
	}
	for i, cl := range plan.Clients {
		c, ok := cl.(*Client)
		if !ok {
			return nil, fmt.Errorf("%s round: client %d is a %T", name, i, cl)
		}
		if err := c.install(global.Clone()); err != nil {
			return nil, err
		}
		for p, t := range c.P {
			out[fmt.Sprintf("client%d.next.%s", i, p)] = t.Clone()
		}
	}
	maps.Copy(out, batchLosses(losses))
	return out, nil
}

// batchLosses is "client<id>.batch_losses" for every client that trained.
func batchLosses(by map[int][]float32) tensor.Named {
	out := tensor.Named{}
	for id, v := range by {
		out[fmt.Sprintf("client%d.batch_losses", id)] = &tensor.Tensor{Shape: []int{len(v)}, Data: append([]float32(nil), v...)}
	}
	return out
}

package methods

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// RoundInputs is one federated round in the reference fixtures' layout:
// every client starts from Init, trains opts.Epochs local epochs over its
// images (batches of opts.Batch in stored order when opts.InOrder), with a
// fresh optimizer, and the server aggregates.
type RoundInputs struct {
	Model   *clip.Model
	Init    tensor.Named // initial parameters, reference names
	Tokens  []int        // class prompts [C, ctx]
	Classes int
	Clients []TensorClient
	Train   train.Options
	Seed    uint64
}

// Round runs one round of method meth (settings sec) through the
// production path — its clients wrapped in federation Sites, its Strategy,
// the Coordinator — and returns the fixtures' output layout:
// "client<i>.trained.<name>" for every parameter a site keeps and
// "global.<name>" for every tensor the server holds after aggregating.
func Round(ctx context.Context, meth Method, sec config.Section, in RoundInputs) (tensor.Named, error) {
	depth, err := meth.Depth(sec, min(in.Model.W.Config.Vision.Layers, in.Model.W.Config.Text.Layers))
	if err != nil {
		return nil, err
	}
	if depth == AnyDepth {
		return nil, fmt.Errorf("%s does not train", meth.Info().Name)
	}
	env, err := TensorEnv(in.Model, depth, in.Tokens, in.Classes, in.Clients, in.Train, in.Seed)
	if err != nil {
		return nil, err
	}
	defer env.TrainStore.Close()
	env.Init = in.Init
	plan, err := meth.Build(env, sec)
	if err != nil {
		return nil, err
	}
	if plan.Strategy == nil {
		return nil, fmt.Errorf("%s does not train", meth.Info().Name)
	}
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, "")
	}
	coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: 1, Fraction: 1,
		Seed: in.Seed, EvalEvery: 2, Logger: slog.New(slog.DiscardHandler)}
	if _, err := coord.Run(ctx); err != nil {
		return nil, err
	}
	out := tensor.Named{}
	if plan.Site != nil {
		for i := range plan.Clients {
			st, err := plan.Site(i)
			if err != nil {
				return nil, err
			}
			for k, v := range st {
				out[fmt.Sprintf("client%d.trained.%s", i, k)] = v
			}
		}
	}
	if plan.Global != nil {
		for k, v := range plan.Global() {
			out["global."+k] = v
		}
	}
	return out, nil
}

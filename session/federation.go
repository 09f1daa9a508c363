package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/robust"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/secagg"
)

// Federation is how a session federates its plan: the aggregation
// section's wrapping of the method's strategy, secure aggregation, the
// compression of the messages, and the coordinator's schedule. `pfedmma
// run` and `pfedmma serve` build their strategy and schedule from it alike,
// so a simulation reproduces a hardened deployment.
type Federation struct {
	// Aggregation is the configuration's aggregation section (robust
	// rules, clipping, differential privacy).
	Aggregation config.Aggregation
	// Secure is federation.secure_aggregation.
	Secure bool
	// Compress encodes every message's tensors (federation.compress).
	Compress compress.Codec
	// Seed seeds the robust rules' noise and the sampling of sites.
	Seed uint64
	// The schedule: rounds, the fraction of sites asked each round, the
	// rounds after which every site is evaluated, and whether each client
	// is evaluated on its own.
	Rounds        int
	Fraction      float64
	EvalEvery     int
	EvaluateAlone bool
	// DropRate is federation.client_drop_rate (FLiP's client drop:
	// federation.Coordinator.DropRate) and PersonalEval eval.personal
	// (FLiP's personal accuracy: federation.Coordinator.PersonalEval).
	DropRate     float64
	PersonalEval bool
}

// Plan builds meth's plan on env with its settings sec and wraps its
// strategy as the aggregation section asks (robust.FromConfig), refusing
// secure aggregation that the strategy or the section cannot take. A
// method that does not train (no strategy) is left as it is.
func (f Federation) Plan(meth methods.Method, env *methods.Env, sec config.Section) (*methods.Plan, error) {
	plan, err := meth.Build(env, sec)
	if err != nil || plan.Strategy == nil {
		return plan, err
	}
	if err := f.checkSecure(plan.Strategy); err != nil {
		return nil, err
	}
	if plan.Strategy, err = robust.FromConfig(plan.Strategy, f.Aggregation, f.Seed, slog.Default()); err != nil {
		return nil, err
	}
	return plan, nil
}

// Coordinator is the federation's schedule for strat — the rounds, the
// sampling of sites and the rounds after which every site is evaluated —
// with its simulated secure aggregator when secure aggregation is on.
func (f Federation) Coordinator(strat federation.Strategy) *federation.Coordinator {
	return &federation.Coordinator{Strategy: strat, Rounds: f.Rounds, Fraction: f.Fraction, Seed: f.Seed, EvalEvery: f.EvalEvery,
		EvaluateAlone: f.EvaluateAlone, PayloadBytes: f.Compress.Bytes,
		Secure: f.SecureAggregator(strat), DropRate: f.DropRate, PersonalEval: f.PersonalEval}
}

// secureKey names the key that asks for secure aggregation in its
// refusals.
const secureKey = "federation.secure_aggregation"

// checkSecure refuses secure aggregation (federation.secure_aggregation)
// with a strategy that needs each site's update: only a weighted or uniform
// mean of the shared tensors (FedAvg) can be computed from a masked sum, and
// the aggregation section's median, trimmed mean, server-side clipping and
// differential privacy (which clips each update at the server) need the
// updates one by one.
func (f Federation) checkSecure(strat federation.Strategy) error {
	if !f.Secure {
		return nil
	}
	a := f.Aggregation
	switch {
	case a.Rule != "" && a.Rule != "mean":
		return fmt.Errorf("%s: aggregation.rule %s needs each site's update, which secure aggregation hides from the server: use the mean", secureKey, a.Rule)
	case a.ClipNorm > 0:
		return fmt.Errorf("%s: aggregation.clip_norm clips each site's update at the server, which secure aggregation hides from it: clip at the site instead", secureKey)
	case a.DP.On():
		return fmt.Errorf("%s: aggregation.dp clips each site's update at the server before adding noise, which secure aggregation hides from it", secureKey)
	case f.Compress != "" && f.Compress != compress.None:
		return fmt.Errorf("%s: federation.compress %s: a masked update is uniform 64-bit words, which no codec shrinks; use one or the other", secureKey, f.Compress)
	}
	if _, err := secureUniform(strat); err != nil {
		return fmt.Errorf("%s: %w", secureKey, err)
	}
	return nil
}

// secureUniform says how strat weights the sites: uniform or by example
// count; an error when strat is not a mean of the shared tensors.
func secureUniform(strat federation.Strategy) (bool, error) {
	fa, ok := strat.(*strategy.FedAvg)
	if !ok {
		if strat == nil {
			return false, errors.New("the method does not train")
		}
		return false, fmt.Errorf("the method's server (strategy %q) needs each site's tensors (a pool of other sites' prompts, relayed tensors or a robust rule), which secure aggregation hides: only methods whose server averages the shared tensors (FedAvg, uniform mean) can use it", strat.Name())
	}
	return fa.Uniform, nil
}

// SecureAggregator is the coordinator's secure aggregator for strat (nil
// when secure aggregation is off): the simulation's;
// transport.RunCoordinator replaces it with the networked protocol,
// computing the same bits.
func (f Federation) SecureAggregator(strat federation.Strategy) federation.SecureAggregator {
	if !f.Secure {
		return nil
	}
	uniform, err := secureUniform(strat)
	if err != nil {
		return nil // refused earlier by checkSecure
	}
	return &federation.SimulatedSecure{Quant: secagg.Quantizer{Clip: secagg.DefaultClip, ScaleBits: secagg.DefaultScaleBits}, Uniform: uniform}
}

// Proxy wraps a simulated client's proxy so that it receives and sends
// what it would over the wire with the federation's codec
// (federation.compress): the tensors of its fit and evaluation
// instructions, and of its upload, each encoded and decoded. The transport
// encodes the same messages with the same codec, so serve + sites equal
// `pfedmma run`. Without compression the proxy is returned as it is.
func (f Federation) Proxy(p federation.ClientProxy) federation.ClientProxy {
	if f.Compress == "" || f.Compress == compress.None {
		return p
	}
	return &compressProxy{ClientProxy: p, codec: f.Compress}
}

// compressProxy is a ClientProxy whose messages go through a codec.
type compressProxy struct {
	federation.ClientProxy
	codec compress.Codec
}

// Fit implements federation.ClientProxy: download and upload compressed.
func (p *compressProxy) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	in, err := p.codec.RoundTrip(ins.Params)
	if err != nil {
		return federation.FitRes{}, fmt.Errorf("client %d round %d download: %w", p.ID(), ins.Round, err)
	}
	ins.Params = in
	res, err := p.ClientProxy.Fit(ctx, ins)
	if err != nil {
		return res, err
	}
	if res.Params, err = p.codec.RoundTrip(res.Params); err != nil {
		return federation.FitRes{}, fmt.Errorf("client %d round %d upload: %w", p.ID(), ins.Round, err)
	}
	return res, nil
}

// Evaluate implements federation.ClientProxy: the evaluation's tensors
// arrive compressed.
func (p *compressProxy) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	in, err := p.codec.RoundTrip(ins.Params)
	if err != nil {
		return federation.EvaluateRes{}, fmt.Errorf("client %d round %d evaluation download: %w", p.ID(), ins.Round, err)
	}
	ins.Params = in
	return p.ClientProxy.Evaluate(ctx, ins)
}

package experiment

import (
	"errors"
	"fmt"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/secagg"
)

// errSecureKey prefixes refusals of secure aggregation with the key that
// asks for it.
const secureKey = "federation.secure_aggregation"

// checkSecure refuses secure aggregation (federation.secure_aggregation)
// with a strategy that needs each site's update: only a weighted or uniform
// mean of the shared tensors (FedAvg) can be computed from a masked sum, and
// the aggregation section's median, trimmed mean, server-side clipping and
// differential privacy (which clips each update at the server) need the
// updates one by one.
func checkSecure(o Options, strat federation.Strategy) error {
	if !o.SecureAggregation {
		return nil
	}
	a := o.Aggregation
	switch {
	case a.Rule != "" && a.Rule != "mean":
		return fmt.Errorf("%s: aggregation.rule %s needs each site's update, which secure aggregation hides from the server: use the mean", secureKey, a.Rule)
	case a.ClipNorm > 0:
		return fmt.Errorf("%s: aggregation.clip_norm clips each site's update at the server, which secure aggregation hides from it: clip at the site instead", secureKey)
	case a.DP.On():
		return fmt.Errorf("%s: aggregation.dp clips each site's update at the server before adding noise, which secure aggregation hides from it", secureKey)
	case o.Compress != "" && o.Compress != compress.None:
		return fmt.Errorf("%s: federation.compress %s: a masked update is uniform 64-bit words, which no codec shrinks; use one or the other", secureKey, o.Compress)
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

// secure is the coordinator's secure aggregator for strat (nil when
// secure aggregation is off): the simulation's; transport.RunCoordinator
// replaces it with the networked protocol, computing the same bits.
func (o Options) secure(strat federation.Strategy) federation.SecureAggregator {
	if !o.SecureAggregation {
		return nil
	}
	uniform, err := secureUniform(strat)
	if err != nil {
		return nil // refused earlier by checkSecure
	}
	return &federation.SimulatedSecure{Quant: secagg.Quantizer{Clip: secagg.DefaultClip, ScaleBits: secagg.DefaultScaleBits}, Uniform: uniform}
}

package methods_test

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/methods/adapt"
	"github.com/pfedmma/pfedmma/methods/fedotp"
	"github.com/pfedmma/pfedmma/methods/fedpgp"
	"github.com/pfedmma/pfedmma/methods/pfedmoap"
	"github.com/pfedmma/pfedmma/methods/promptfl"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/pretrain"
	"github.com/pfedmma/pfedmma/world"
)

// TestRangeChecksRefuseNonFinite: every range check of a setting refuses
// NaN and ±Inf (before: `x < 0` let NaN through, so lr=nan or
// momentum=nan reached the arithmetic and gave NaN results with exit 0).
func TestRangeChecksRefuseNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	type check struct {
		name     string
		validate func() error
	}
	var checks []check
	add := func(name string, v func() error) { checks = append(checks, check{name, v}) }
	for _, bad := range []float64{nan, inf} {
		add("pfedmoap lr", func() error { c := pfedmoap.DefaultConfig(); c.LR = bad; return c.Validate() })
		add("pfedmoap momentum", func() error { c := pfedmoap.DefaultConfig(); c.Momentum = bad; return c.Validate() })
		add("pfedmoap weight_decay", func() error { c := pfedmoap.DefaultConfig(); c.WeightDecay = bad; return c.Validate() })
		add("pfedmoap gating_weight_decay", func() error { c := pfedmoap.DefaultConfig(); c.GateWeightDecay = bad; return c.Validate() })
		add("pfedmoap init_std", func() error { c := pfedmoap.DefaultConfig(); c.InitStd = bad; return c.Validate() })
		add("fedpgp init_std", func() error { c := fedpgp.DefaultConfig(); c.InitStd = bad; return c.Validate() })
		add("fedpgp temp", func() error { c := fedpgp.DefaultConfig(); c.Temp = bad; return c.Validate() })
		add("fedpgp mu", func() error { c := fedpgp.DefaultConfig(); c.Mu = bad; return c.Validate() })
		add("fedotp init_std", func() error { c := fedotp.DefaultConfig(); c.InitStd = bad; return c.Validate() })
		add("fedotp thresh", func() error { c := fedotp.DefaultConfig(); c.OT.Thresh = bad; return c.Validate() })
		add("promptfl init_std", func() error { c := promptfl.DefaultConfig(); c.InitStd = bad; return c.Validate() })
		add("promptfl prox_mu", func() error { c := promptfl.DefaultConfig(); c.ProxMu = bad; return c.Validate() })
		add("adapt tau", func() error { c := adapt.Config{Domains: 1, NCtx: 4, Tau: bad}; return c.Validate() })
		add("adapt lambda", func() error { c := adapt.Config{Domains: 1, NCtx: 4, Tau: 0.1, Lambda: bad}; return c.Validate() })
		add("cosine base", func() error { return optim.Cosine{Base: bad, Total: 10}.Validate() })
		add("cosine min", func() error { return optim.Cosine{Base: 1, Min: bad, Total: 10}.Validate() })
		add("world holdout", func() error {
			c := world.DefaultConfig()
			c.HoldoutFraction = bad
			_, err := world.New(c)
			return err
		})
		add("pretrain holdout", func() error { o := pretrain.DefaultOptions(); o.HoldoutFraction = bad; return o.Validate() })
		add("pretrain min lr", func() error { o := pretrain.DefaultOptions(); o.MinLR = bad; return o.Validate() })
		add("pretrain weight decay", func() error { o := pretrain.DefaultOptions(); o.WeightDecay = bad; return o.Validate() })
		add("pretrain fashion fraction", func() error { o := pretrain.DefaultOptions(); o.FashionFraction = bad; return o.Validate() })
	}
	for i, c := range checks {
		if err := c.validate(); err == nil {
			t.Errorf("%s = %v accepted", c.name, []string{"NaN", "+Inf"}[i/(len(checks)/2)])
		}
	}
	// the defaults themselves pass (the checks are not refusing everything)
	for name, v := range map[string]func() error{
		"pfedmoap": pfedmoap.DefaultConfig().Validate, "fedpgp": fedpgp.DefaultConfig().Validate,
		"fedotp": fedotp.DefaultConfig().Validate, "promptfl": promptfl.DefaultConfig().Validate,
		"pretrain": pretrain.DefaultOptions().Validate,
	} {
		if err := v(); err != nil {
			t.Errorf("%s defaults refused: %v", name, err)
		}
	}
}

package fedotp

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestRoundProductionPath runs the fedotp fixture round through the same
// code as `pfedmma run` and `pfedmma round`: clients upload prompt 0, the
// server averages it, the local prompt stays.
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "fedotp/init.safetensors", []string{"fedotp/round.safetensors"}, nil, "fedotp/round.safetensors", 1e-4)
	if g := out["global."+ParamCtx]; g == nil || g.Shape[0] != 1 {
		t.Errorf("global context %v, want one averaged prompt", g)
	}
}

// TestUnselectedClientsEvaluateNewGlobal (issue 17, defect 2): with
// federation.fraction < 1, a client not selected in a round evaluates — and
// keeps — [the round's new global prompt; its own local prompt]
// (baselines.md §4), sent by the strategy's ConfigureEvaluate: no stale
// global prompt, no other client's local prompt.
func TestUnselectedClientsEvaluateNewGlobal(t *testing.T) {
	ctx := context.Background()
	f, err := parity.Load(paritytest.Model(t), paritytest.Testdata+"fedotp/init.safetensors",
		[]string{paritytest.Testdata + "fedotp/round.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.TrainOptions()
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := f.IntsOf("tokens")
	var clients []parity.TensorClient
	for i := 0; ; i++ {
		px, ok := f.Batch[fmt.Sprintf("client%d.images", i)]
		if !ok {
			break
		}
		labels, _ := f.IntsOf(fmt.Sprintf("client%d.labels", i))
		clients = append(clients, parity.TensorClient{Pixels: px.Data, Labels: labels})
	}
	if len(clients) < 2 {
		t.Fatalf("the fixture has %d clients, want at least 2", len(clients))
	}
	env, err := parity.TensorEnv(f.Model, methods.TokenFeatures, tokens, len(tokens)/f.Model.W.Config.Text.ContextLength, clients, opts, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	plan, err := Method{}.Build(env, sec)
	if err != nil {
		t.Fatal(err)
	}
	var proxies []federation.ClientProxy
	for _, c := range plan.Clients {
		proxies = append(proxies, federation.NewSite(c, ""))
	}
	// round 0 trains every client, round 1 one of them
	co := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: 2, Fraction: 0.01, Seed: 3,
		EvalEvery: 1, Logger: slog.New(slog.DiscardHandler)}
	var afterRound0 []tensor.Named
	co.OnRound = func(r federation.RoundReport) error {
		if r.Round == 0 {
			for i := range plan.Clients {
				s, err := plan.Site(i)
				if err != nil {
					return err
				}
				afterRound0 = append(afterRound0, s)
			}
		}
		return nil
	}
	hist, err := co.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sel := hist.Rounds[1].Selected
	if len(sel) != 1 {
		t.Fatalf("round 1 selected %v, want one client", sel)
	}
	g := plan.Global()[ParamCtx]
	n := len(g.Data)
	for i := range plan.Clients {
		site, err := plan.Site(i)
		if err != nil {
			t.Fatal(err)
		}
		p := site[ParamCtx].Data
		if !slices.Equal(p[:n], g.Data) {
			t.Errorf("client %d (round 1 selected %v) holds another global prompt than the server's after round 1", i, sel)
		}
		if i == sel[0] {
			continue
		}
		if !slices.Equal(p[n:], afterRound0[i][ParamCtx].Data[n:]) {
			t.Errorf("unselected client %d's local prompt changed in a round it did not train", i)
		}
		if slices.Equal(p[:n], afterRound0[i][ParamCtx].Data[:n]) {
			t.Errorf("unselected client %d still holds round 0's global prompt", i)
		}
	}
}

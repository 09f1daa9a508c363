package pfedmoap

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestRoundFixtureProductionPath (issue 17, defect 8): the reference round
// runs through the production strategy (KNNPool, loaded with the fixture's
// pool, picks the experts) and the production client (promptfed, as `pfedmma
// run` builds it) — not the replay of RoundFromFile: the selection, the
// mean batch loss and every trained tensor and its update p − init agree
// with the authors' code.
func TestRoundFixtureProductionPath(t *testing.T) {
	checkRoundProduction(t, "pfedmoap/")
}

// checkRoundProduction runs dir's (under testdata) init and round files
// through the production path and compares it with the round file.
func checkRoundProduction(t *testing.T, dir string) {
	m := paritytest.Model(t)
	f, err := parity.Load(m, paritytest.Testdata+dir+"init.safetensors", []string{paritytest.Testdata + dir + "round.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := paritytest.Read(t, paritytest.Testdata+dir+"round.safetensors")
	init, _ := paritytest.Read(t, paritytest.Testdata+dir+"init.safetensors")
	if got, want := out["selected"].Data, ref["selected"].Data; !slices.Equal(got, want) {
		t.Fatalf("the production strategy selected %v, the reference %v", got, want)
	}
	rel(t, "distances_to_0", out["distances_to_0"], ref["distances_to_0"], 1e-5)
	var mean float64
	for _, v := range ref["client0.batch_losses"].Data {
		mean += float64(v)
	}
	mean /= float64(len(ref["client0.batch_losses"].Data))
	if got := float64(out["client0.loss"].Data[0]); math.Abs(got-mean) > 1e-5*(1+math.Abs(mean)) {
		t.Errorf("mean batch loss %v, reference %v", got, mean)
	}
	steps := len(ref["client0.batch_losses"].Data)
	n := 0
	for name := range init {
		if name != ParamCtx && !IsGate(name) {
			continue
		}
		k := "client0.trained." + name
		if out[k] == nil {
			t.Fatalf("no %s", k)
		}
		base := init[name]
		if name == ParamCtx {
			base = ref["global_prompt"]
		}
		rel(t, k, out[k], ref[k], 1e-4)
		updateClose(t, k, out[k], ref[k], base, 1e-4, steps)
		n++
	}
	if n < 2 {
		t.Fatalf("compared %d tensors", n)
	}
}

// TestOneExpertSendsNoPrompts (issue 17, defect 3): pfedmoap.num_experts 1
// is the local prompt alone — the production server sends no other
// client's prompt (K = 0 is not "all"), in nearest and random selection.
func TestOneExpertSendsNoPrompts(t *testing.T) {
	for _, sel := range []string{"nearest", "random"} {
		s := fromConfig(DefaultConfig())
		s.NumExperts, s.Selection = 1, sel
		m := paritytest.Model(t)
		f, err := parity.Load(m, paritytest.Testdata+"pfedmoap/init.safetensors", []string{paritytest.Testdata + "pfedmoap/round.safetensors"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tokens, _ := f.IntsOf("tokens")
		img := f.Batch["client0.images"].Data
		labels, _ := f.IntsOf("client0.labels")
		S := m.W.Config.Vision.ImageSize
		half := len(labels) / 2
		clients := []parity.TensorClient{
			{Pixels: img[:half*3*S*S], Labels: labels[:half]},
			{Pixels: img[half*3*S*S:], Labels: labels[half:]},
			{Pixels: img[:half*3*S*S], Labels: labels[:half]},
		}
		opts, _ := f.TrainOptions()
		env, err := parity.TensorEnv(m, methods.Features, tokens, len(tokens)/m.W.Config.Text.ContextLength, clients, opts, 5)
		if err != nil {
			t.Fatal(err)
		}
		s.NCtx = f.Params[ParamCtx].Shape[0]
		s.GateWidth, s.GateHeads = 16, 4
		plan, err := Method{}.Build(env, s)
		if err != nil {
			t.Fatal(err)
		}
		var proxies []federation.ClientProxy
		for _, c := range plan.Clients {
			proxies = append(proxies, federation.NewSite(c, ""))
		}
		var sent []tensor.Named
		co := &federation.Coordinator{Strategy: recordConfigure{plan.Strategy, &sent}, Proxies: proxies, Rounds: 2, Fraction: 1, Seed: 5, NoEvaluate: true,
			Logger: slog.New(slog.DiscardHandler)}
		if _, err := co.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		env.TrainStore.Close()
		if len(sent) != 6 {
			t.Fatalf("%s: %d downloads, want 6", sel, len(sent))
		}
		for i, in := range sent {
			for name := range in {
				if name != ParamCtx {
					t.Errorf("%s: download %d holds %q: another client's prompt sent with num_experts 1", sel, i, name)
				}
			}
		}
	}
}

// recordConfigure keeps every download of a strategy.
type recordConfigure struct {
	federation.Strategy
	sent *[]tensor.Named
}

func (r recordConfigure) Configure(round int, selected []int) (map[int]tensor.Named, error) {
	out, err := r.Strategy.Configure(round, selected)
	for _, id := range selected {
		*r.sent = append(*r.sent, out[id])
	}
	return out, err
}

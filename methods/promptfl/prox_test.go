package promptfl

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestProxTerm: the FedProx term is (μ/2)·‖w − w_g‖² (float64 from the
// context and the anchor) and adds μ·(w − w_g) to the gradient; with μ = 0
// an anchor adds no term and no gradient.
func TestProxTerm(t *testing.T) {
	m, tokens := randomModel(4, 3)
	rng := rand.New(rand.NewPCG(8, 8))
	img := make([]float32, 5*6)
	for i := range img {
		img[i] = float32(rng.NormFloat64())
	}
	labels := []int{0, 3, 1, 2, 1}
	plain, err := New(m, tokens, Config{NCtx: 3, InitStd: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, terms, _, err := plain.Step(img, labels)
	if err != nil {
		t.Fatal(err)
	}
	g0 := plain.grad.Clone().Data
	global := tensor.Named{ParamCtx: plain.ctx.Clone()}
	for i := range global[ParamCtx].Data {
		global[ParamCtx].Data[i] += float32(rng.NormFloat64())
	}
	if _, ok := terms["loss_prox"]; ok {
		t.Errorf("no anchor: terms %v hold loss_prox", terms)
	}
	for _, mu := range []float64{0, 0.7} {
		l, err := New(m, tokens, Config{NCtx: 3, InitStd: 1, Seed: 1, ProxMu: mu})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetGlobal(global); err != nil {
			t.Fatal(err)
		}
		loss, terms, _, err := l.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		var ss float64
		for i, w := range l.ctx.Data {
			d := float64(w) - float64(global[ParamCtx].Data[i])
			ss += d * d
			want := float64(g0[i]) + mu*d
			if got := float64(l.grad.Data[i]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("μ %v: grad[%d] = %v, want %v", mu, i, got, want)
			}
		}
		prox, ok := terms["loss_prox"]
		if mu == 0 {
			if ok {
				t.Errorf("μ 0: terms %v hold loss_prox", terms)
			}
			continue
		}
		if want := mu / 2 * ss; !ok || math.Abs(prox-want) > 1e-6*want {
			t.Errorf("μ %v: loss_prox %v, want %v", mu, prox, want)
		}
		if math.Abs(loss-terms["loss_ce"]-prox) > 1e-9*(1+loss) {
			t.Errorf("μ %v: loss %v ≠ loss_ce %v + loss_prox %v", mu, loss, terms["loss_ce"], prox)
		}
	}
}

// TestInitContext: the context is drawn N(0, init_std²) from the seed:
// each value σ·z for the generator's successive normals z (replayed), and
// n_ctx 1 is a valid setting.
func TestInitContext(t *testing.T) {
	m, tokens := randomModel(4, 1)
	l, err := New(m, tokens, Config{NCtx: 1, InitStd: 0.3, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	ref := rand.New(rand.NewPCG(5, 0x5eed))
	for i, v := range l.ctx.Data {
		if want := float32(ref.NormFloat64() * 0.3); v != want {
			t.Fatalf("ctx[%d] = %v, want %v", i, v, want)
		}
	}
}

// TestProxRound: FedProx in a round, replayed and through the production
// path. The anchor is the round's global context, so the first batch's
// loss is the plain one and the second's exceeds it by (μ/2)·‖w₂ − w₀‖² > 0
// (the same w₂: the first step's proximal gradient is zero); the production
// round with prox_mu set gives the replay's trained contexts, not the
// plain ones.
func TestProxRound(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/promptfl/init.safetensors")
	rd, meta := paritytest.Read(t, "../../testdata/promptfl/round.safetensors")
	proxMeta := map[string]string{}
	for k, v := range meta {
		proxMeta[k] = v
	}
	const mu = "50"
	proxMeta["prox_mu"] = mu
	plain, err := RoundFromFile(m, init, rd, meta)
	if err != nil {
		t.Fatal(err)
	}
	prox, err := RoundFromFile(m, init, rd, proxMeta)
	if err != nil {
		t.Fatal(err)
	}
	lp, lx := plain["client0.batch_losses"].Data, prox["client0.batch_losses"].Data
	if len(lp) < 2 {
		t.Fatalf("client 0 trains %d batches, the test needs 2", len(lp))
	}
	if math.Abs(float64(lx[0]-lp[0])) > 1e-6*(1+math.Abs(float64(lp[0]))) {
		t.Errorf("first batch: loss %v with FedProx, %v without (the anchor is the start)", lx[0], lp[0])
	}
	if !(lx[1] > lp[1]) {
		t.Errorf("second batch: loss %v with FedProx, not above %v without", lx[1], lp[1])
	}
	f, err := parity.Load(m, paritytest.Testdata+"promptfl/init.safetensors", []string{paritytest.Testdata + "promptfl/round.safetensors"}, []string{"prox_mu=" + mu})
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client0.trained." + ParamCtx, "client1.trained." + ParamCtx} {
		paritytest.Close(t, name, out[name].Data, prox[name].Data, 1e-4)
		var d, ref float64
		for i, v := range plain[name].Data {
			d = math.Max(d, math.Abs(float64(v-prox[name].Data[i])))
			ref = math.Max(ref, math.Abs(float64(prox[name].Data[i]-init[ParamCtx].Data[i])))
		}
		if name == "client0.trained."+ParamCtx && d <= 1e-2*ref { // client 1 trains one batch
			t.Fatalf("%s: FedProx changes the trained context by %v only (update %v): the test cannot tell", name, d, ref)
		}
	}
}

package adapt

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// tensorPlan builds ADAPT on methodtest.PromptModel over in-memory clients of
// domains doms (several clients may share a domain).
func tensorPlan(t *testing.T, doms []int, s *Settings) (*methods.Env, *methods.Plan) {
	t.Helper()
	m, tokens := methodtest.PromptModel(s.NCtx)
	const C = methodtest.PromptClasses
	clients := methodtest.TensorClients(rand.New(rand.NewPCG(8, 1)), len(doms), 10, 8, C)
	env, err := parity.TensorEnv(m, 1, tokens, C, clients, train.Options{Epochs: 1, Batch: 4}, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	for i, d := range doms {
		env.Task.Clients[i].Domain = d
	}
	return env, methodtest.Build(t, Method{}, env, s)
}

// round runs one full-participation round of a plan by hand.
func round(t *testing.T, plan *methods.Plan, r int) {
	t.Helper()
	methodtest.Round(t, plan, r, all(plan))
}

// all lists plan's clients.
func all(plan *methods.Plan) []int {
	var ids []int
	for i := range plan.Clients {
		ids = append(ids, i)
	}
	return ids
}

// TestResumeBitIdentical: three rounds straight equal two rounds, a save of
// every client and the server, a fresh plan restored from it, and the third
// round — parameters, external prompt copies and their EMA targets, and the
// global model, bit for bit. Two clients share domain 1.
func TestResumeBitIdentical(t *testing.T) {
	for _, ada := range []bool{false, true} {
		s := DefaultSettings()
		s.NCtx, s.AdaLN, s.AdaLNLayers, s.LR = 2, ada, 2, 0.01
		doms := []int{0, 1, 1}
		build := func() *methods.Plan {
			_, plan := tensorPlan(t, doms, s)
			return plan
		}
		ids := []int{0, 1, 2}
		r := methodtest.Resume(t, build, [3][]int{ids, ids, ids})
		for i := range r.Straight.Clients {
			a, b := r.Straight.Clients[i].(*client.Client), r.Resumed.Clients[i].(*client.Client)
			methodtest.SameNamed(t, "params", b.P, a.P)
			methodtest.SameNamed(t, "received", b.Site.(*site).Recv, a.Site.(*site).Recv)
			if len(a.Site.(*site).Recv) == 0 {
				t.Fatalf("client %d received no prompts in three rounds", i)
			}
		}
	}
}

// TestRelayAndEMA: after a round each client holds the other domains'
// prompts as EMA targets (the mean over the domain's clients), its external
// copies move toward them during training, and its own domain's prompt is
// never overwritten by another domain's.
func TestRelayAndEMA(t *testing.T) {
	s := DefaultSettings()
	s.NCtx, s.LR = 2, 0.05
	doms := []int{0, 1, 1}
	_, plan := tensorPlan(t, doms, s)
	round(t, plan, 0)
	c0 := plan.Clients[0].(*client.Client)
	c1, c2 := plan.Clients[1].(*client.Client), plan.Clients[2].(*client.Client)
	ext := c0.P[TextName(1)].Clone() // client 0's copy of domain 1, still the initial value
	up1, up2 := c1.P[TextName(1)].Clone(), c2.P[TextName(1)].Clone()
	round(t, plan, 1)
	want := meanOf([]*tensor.Tensor{up1, up2})
	methodtest.SameNamed(t, "client 0's target for domain 1", tensor.Named{"x": c0.Site.(*site).Recv[TextName(1)]}, tensor.Named{"x": want})
	if _, ok := c0.Site.(*site).Recv[TextName(0)]; ok {
		t.Error("client 0 keeps an EMA target for its own domain")
	}
	// 3 steps of EMA α = 0.99 toward the target: t = target + 0.99³(t₀ − target)
	got := c0.P[TextName(1)].Data
	for i, v := range want.Data {
		e := v + 0.970299*(ext.Data[i]-v)
		if d := got[i] - e; d > 1e-6 || d < -1e-6 {
			t.Fatalf("client 0's domain-1 copy [%d] = %g, want %g after three EMA steps", i, got[i], e)
		}
	}
	if c1.Site.(*site).Domain != c2.Site.(*site).Domain || c0.Site.(*site).Domain == c1.Site.(*site).Domain {
		t.Fatalf("domains %d %d %d, want 0 1 1", c0.Site.(*site).Domain, c1.Site.(*site).Domain, c2.Site.(*site).Domain)
	}
}

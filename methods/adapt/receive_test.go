package adapt

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestReceiveAveragesOwnDomain: a relayed text prompt of the client's own
// domain is averaged with the client's copy (the mean, computed here in
// float64, of its prompt and the peer's); with no peer of its domain the
// prompt is left as it was.
func TestReceiveAveragesOwnDomain(t *testing.T) {
	s := DefaultSettings()
	s.NCtx = 2
	m, tokens := methodtest.PromptModel(s.NCtx)
	const C = methodtest.PromptClasses
	clients := methodtest.TensorClients(rand.New(rand.NewPCG(8, 1)), 2, 10, 8, C)
	env, err := parity.TensorEnv(m, 1, tokens, C, clients, train.Options{Epochs: 1, Batch: 4}, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	plan := methodtest.Build(t, Method{}, env, s)
	c := plan.Clients[0].(*client.Client)
	own := TextName(c.Site.(*site).Domain)
	mine := c.P[own].Clone()
	peer := mine.Clone()
	for i := range peer.Data {
		peer.Data[i] = float32(i%7) - 3
	}
	// no peer of its domain: unchanged
	if err := c.Site.(*site).Receive(tensor.Named{}); err != nil {
		t.Fatal(err)
	}
	for i, v := range c.P[own].Data {
		if v != mine.Data[i] {
			t.Fatalf("%s[%d] = %g with no peer, want %g", own, i, v, mine.Data[i])
		}
	}
	if err := c.Site.(*site).Receive(tensor.Named{strategy.RelayName(1, own): peer}); err != nil {
		t.Fatal(err)
	}
	for i, v := range c.P[own].Data {
		want := (float64(mine.Data[i]) + float64(peer.Data[i])) / 2
		if math.Abs(float64(v)-want) > 1e-6*(1+math.Abs(want)) {
			t.Fatalf("%s[%d] = %g after a same-domain peer, want the mean %g", own, i, v, want)
		}
	}
}

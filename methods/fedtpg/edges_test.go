package fedtpg

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/progress"
)

// TestQueries: the generator learns n_ctx·d_ctx queries, whatever d_ctx a
// caller asks Shapes about.
func TestQueries(t *testing.T) {
	c := GenConfig{NCtx: 4, DCtx: 2, E: 8, D: 6, CrossHeads: 1, SelfHeads: 1, FFMult: 1}
	if q := c.Queries(); q != 8 {
		t.Errorf("4 × 2 queries: %d", q)
	}
	if s := c.Shapes()[Prefix+nameSoftPrompt]; s[0] != 8 {
		t.Errorf("soft_prompt shape %v, want [8, 8]", s)
	}
}

// TestSettingsPosition: class_token_position is accepted empty or "end"
// and refused otherwise, naming the key.
func TestSettingsPosition(t *testing.T) {
	for _, pos := range []string{"", "end"} {
		s := Method{}.DefaultConfig().(*Settings)
		s.ClassTokenPosition = pos
		if err := config.CheckSection("fedtpg", s); err != nil {
			t.Errorf("position %q: %v", pos, err)
		}
	}
	for _, pos := range []string{"middle", "front"} {
		s := Method{}.DefaultConfig().(*Settings)
		s.ClassTokenPosition = pos
		if err := config.CheckSection("fedtpg", s); err == nil || !strings.Contains(err.Error(), "fedtpg.class_token_position") {
			t.Errorf("position %q: error %v, want one naming fedtpg.class_token_position", pos, err)
		}
	}
}

// TestNameRowsOneLong: rows one token long are whole rows; they are
// refused for holding no class name, not for their length.
func TestNameRowsOneLong(t *testing.T) {
	if _, err := NameRows([]int{49, 50, 7}, 1, 2); err == nil || !strings.Contains(err.Error(), "no class name") {
		t.Errorf("rows of 1: %v", err)
	}
}

// TestEveryTensorTrained: with a self-attention layer (depth 1) a step
// gives every generator tensor a non-zero gradient: among them the
// self-attention layer's feed-forward, with its full ff_mult·E hidden
// units.
func TestEveryTensorTrained(t *testing.T) {
	m, tokens, names := randomModel(t, 4, 3, 3)
	l, err := New(m, tokens, names, Config{NCtx: 3, DCtx: 1, Depth: 1, CrossHeads: 2, SelfHeads: 2, FFMult: 2, InitStd: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 1))
	p, _ := randomParams(l.gen.Cfg, rng, 0.8)
	for name, tt := range p {
		copy(l.p[name].Data, tt.Data)
	}
	if _, _, _, err := l.Step(gradcheck.Rand(rng, 5*6, 1), []int{0, 3, 1, 2, 1}); err != nil {
		t.Fatal(err)
	}
	for name, g := range l.Grads() {
		zero := true
		for _, v := range g.Data {
			zero = zero && v == 0
		}
		if zero {
			t.Errorf("%s: zero gradient", name)
		}
	}
}

// TestFixtureAggregation: the fixtures' "aggregation" metadata sets
// weighted_mean: absent or "uniform …" is the uniform mean, anything else
// the n_i-weighted one.
func TestFixtureAggregation(t *testing.T) {
	f := load(t, "init.safetensors", "round.safetensors")
	for agg, want := range map[string]bool{"": false, "uniform mean over the round's clients": false, "weighted by n_i": true} {
		g := *f
		g.Meta = maps.Clone(f.Meta)
		delete(g.Meta, "weighted_mean")
		delete(g.Meta, "aggregation")
		if agg != "" {
			g.Meta["aggregation"] = agg
		}
		sec, err := Method{}.SettingsFrom(&g)
		if err != nil {
			t.Fatal(err)
		}
		if got := sec.(*Settings).WeightedMean; got != want {
			t.Errorf("aggregation %q: weighted_mean %v, want %v", agg, got, want)
		}
	}
}

// TestFixtureRoundRefusesClasses: a client class outside the label space,
// or a label outside the client's classes, is refused naming the tensor
// and the range.
func TestFixtureRoundRefusesClasses(t *testing.T) {
	f := load(t, "init.safetensors", "round.safetensors")
	C := len(f.Ints["tokens"]) / f.Model.W.Config.Text.ContextLength
	cl := f.Ints["client0.classes"]
	for _, tc := range []struct {
		want string
		mod  func(ints map[string][]int)
	}{
		{fmt.Sprintf("\"client0.classes\": class %d outside 0..%d", C, C-1), func(ints map[string][]int) {
			c := append([]int(nil), cl...)
			c[0] = C
			ints["client0.classes"] = c
		}},
		{fmt.Sprintf("\"client0.labels\": label %d of image 0 outside the client's %d classes", len(cl), len(cl)), func(ints map[string][]int) {
			l := append([]int(nil), ints["client0.labels"]...)
			l[0] = len(cl)
			ints["client0.labels"] = l
		}},
	} {
		g := *f
		g.Ints = maps.Clone(f.Ints)
		tc.mod(g.Ints)
		if _, err := (Method{}).FixtureRound(context.Background(), &g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one saying %s", err, tc.want)
		}
	}
}

// TestOwnClassRoundBar: a client trained over its own classes runs in a
// copy of the run's Env, and its batches' progress is a child of the
// round bar its Fit's context carries.
func TestOwnClassRoundBar(t *testing.T) {
	s := testSettings()
	m, tokens, _ := randomModel(t, 6, s.NCtx, 3)
	S := m.W.Config.Vision.ImageSize
	rng := rand.New(rand.NewPCG(2, 5))
	env, err := parity.TensorEnv(m, methods.Features, tokens, 6,
		[]parity.TensorClient{{Pixels: gradcheck.Rand(rng, 5*3*S*S, 1), Labels: []int{4, 1, 1, 4, 4}}}, testOpts(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	c := plan.Clients[0].(*client.Client)
	if c.Env == env {
		t.Fatal("the own-class client shares the run's Env")
	}
	var out bytes.Buffer
	bar := progress.New(&out, 1, "round", "round", progress.WithMode(progress.Plain), progress.WithInterval(0))
	ctx := methods.WithObserver(context.Background(), &methods.Observer{RoundBar: bar})
	if _, err := c.Fit(ctx, federation.FitIns{Round: 0}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "client 0 batch") {
		t.Errorf("the round bar shows no batches of the own-class client: %q", out.String())
	}
}

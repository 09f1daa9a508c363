package pfedmoap

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// relScale checks max|got − want| / scale ≤ tol.
func relScale(t *testing.T, name string, got, want *tensor.Tensor, scale, tol float64) {
	t.Helper()
	if got == nil || want == nil {
		t.Fatalf("%s: missing (got %v, want %v)", name, got != nil, want != nil)
	}
	if len(got.Data) != len(want.Data) {
		t.Fatalf("%s: %d values, want %d", name, len(got.Data), len(want.Data))
	}
	var d float64
	for i := range want.Data {
		d = math.Max(d, math.Abs(float64(got.Data[i]-want.Data[i])))
	}
	if r := d / scale; !(r <= tol) {
		t.Errorf("%s: rel error %.3g > %.3g", name, r, tol)
	} else {
		t.Logf("%s: rel %.2g", name, r)
	}
}

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// rel is the README's scale-relative error max|Δ| / max|ref|.
func rel(t *testing.T, name string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	if want == nil {
		t.Fatalf("%s: missing in the fixture", name)
	}
	relScale(t, name, got, want, maxAbs(want.Data), tol)
}

// updateClose compares the update of one step or round, p − init, with the
// reference's: max|Δ| ≤ tol·max|u_ref| plus one float32 ulp of the largest
// parameter per optimizer step (p is rounded to float32 at every step: the
// gate's updates, ~1e-6 on weights of ~0.2, are resolved only to that ulp,
// 1.5e-8; the zero-gradient biases move by weight decay alone, ~1e-7).
func updateClose(t *testing.T, name string, got, want, init *tensor.Tensor, tol float64, steps int) {
	t.Helper()
	u, v := paritytest.Update(got, init), paritytest.Update(want, init)
	slack := maxAbs(want.Data) * 0x1p-23 * float64(steps)
	var d float64
	for i := range v.Data {
		d = math.Max(d, math.Abs(float64(u.Data[i]-v.Data[i])))
	}
	if lim := tol*maxAbs(v.Data) + slack; !(d <= lim) {
		t.Errorf("%s update: max|Δ| %.3g > %.3g (%.3g of the update scale + one ulp)", name, d, lim, tol)
	} else {
		t.Logf("%s update: max|Δ| %.2g ≤ %.2g", name, d, lim)
	}
}

// zeroBias are the gate gradients that vanish in exact arithmetic (the
// fixture README): compared against the largest gradient's scale.
func zeroBias(name string) bool {
	return strings.HasSuffix(name, "W_k.bias") || strings.HasSuffix(name, "W_v.bias") || strings.HasSuffix(name, "W_o.bias")
}

func TestStepFixture(t *testing.T) {
	checkStepFixture(t, "../../testdata/pfedmoap/")
}

// checkStepFixture compares the step of dir's init and step files with
// the fixture: forward values, gradients, the step and its update.
func checkStepFixture(t *testing.T, dir string) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+"step.safetensors")
	batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "images": ref["images"]}
	out, err := StepFromFile(m, init, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"image_features", "text_features", "nonlocal_text_features", "gate_output", "gate_attention", "logits", "loss"} {
		rel(t, name, out[name], ref[name], 1e-5)
	}
	var gmax float64
	for name, v := range ref {
		if strings.HasPrefix(name, "grad.") {
			gmax = math.Max(gmax, maxAbs(v.Data))
		}
	}
	for name := range init {
		if strings.HasPrefix(name, "expert") {
			continue
		}
		g, s := "grad."+name, "step1."+name
		if zeroBias(name) {
			relScale(t, g, out[g], ref[g], gmax, 1e-4)
		} else {
			rel(t, g, out[g], ref[g], 1e-4)
		}
		rel(t, s, out[s], ref[s], 1e-4)
		updateClose(t, s, out[s], ref[s], init[name], 1e-4, 1)
	}
}

func TestRoundFixture(t *testing.T) {
	checkRoundFixture(t, "../../testdata/pfedmoap/")
}

// checkRoundFixture replays dir's round file (selection, then client 0's
// local epoch) and compares it with the fixture, values and updates.
func checkRoundFixture(t *testing.T, dir string) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+"round.safetensors")
	params := tensor.Named{}
	for name, v := range init {
		if IsGate(name) {
			params[name] = v
		}
	}
	batch := tensor.Named{}
	for _, name := range []string{"pool", "global_prompt", "tokens", "client0.images", "client0.labels"} {
		batch[name] = ref[name]
	}
	out, err := RoundFromFile(m, params, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out["selected"].Data, ref["selected"].Data; !slices.Equal(got, want) {
		t.Fatalf("selected %v, want %v", got, want)
	}
	rel(t, "distances_to_0", out["distances_to_0"], ref["distances_to_0"], 1e-5)
	rel(t, "client0.batch_losses", out["client0.batch_losses"], ref["client0.batch_losses"], 1e-5)
	for name := range params {
		k := "client0.trained." + name
		rel(t, k, out[k], ref[k], 1e-4)
		updateClose(t, k, out[k], ref[k], init[name], 1e-4, len(ref["client0.batch_losses"].Data))
	}
	k := "client0.trained." + ParamCtx
	rel(t, k, out[k], ref[k], 1e-4)
	updateClose(t, k, out[k], ref[k], ref["global_prompt"], 1e-4, len(ref["client0.batch_losses"].Data))
}

// TestGateGradient checks every gate weight and both inputs by finite
// differences.
func TestGateGradient(t *testing.T) {
	const D, H, B, C, Ex = 8, 2, 3, 2, 3
	rng := rand.New(rand.NewPCG(11, 12))
	g, err := NewGate(D, H, 10, rng)
	if err != nil {
		t.Fatal(err)
	}
	// a smaller scale keeps the softmax away from saturation at scale 10
	query := gradcheck.Rand(rng, B*D, 0.3)
	kv := gradcheck.Rand(rng, C*Ex*D, 0.3)
	r := gradcheck.Rand(rng, C*B*D, 1)
	g.Forward(query, B, kv, C, Ex)
	g.ZeroGrad()
	dq, dkv := g.Backward(r)
	dq, dkv = slices.Clone(dq), slices.Clone(dkv)
	loss := func() float64 { return gradcheck.Dot(g.Forward(query, B, kv, C, Ex), r) }
	if err := gradcheck.Check("query", query, dq, loss, 1e-2, 1e-2, 24, rng); err != nil {
		t.Error(err)
	}
	if err := gradcheck.Check("kv", kv, dkv, loss, 1e-2, 1e-2, 48, rng); err != nil {
		t.Error(err)
	}
	checkGate(t, g, loss, rng)
	// head-averaged attention rows sum to one
	a := g.Attention()
	for i := 0; i < C*B; i++ {
		var s float64
		for e := 0; e < Ex; e++ {
			s += float64(a[i*Ex+e])
		}
		if math.Abs(s-1) > 1e-5 {
			t.Fatalf("attention row %d sums to %v", i, s)
		}
	}
}

func TestPoolGradient(t *testing.T) {
	const n, d, r = 3, 4, 3
	rng := rand.New(rand.NewPCG(13, 14))
	x := gradcheck.Rand(rng, n*d*r, 1)
	w := gradcheck.Rand(rng, n*d, 1)
	out := make([]float32, n*d)
	dx := make([]float32, n*d*r)
	PoolBackward(dx, w, n, d, r)
	loss := func() float64 { PoolForward(out, x, n, d, r); return gradcheck.Dot(out, w) }
	if err := gradcheck.Check("pool", x, dx, loss, 1e-2, 1e-3, n*d*r, rng); err != nil {
		t.Error(err)
	}
	PoolForward(out, x, n, d, r)
	if out[1] != x[r] || out[d] != x[d*r] {
		t.Errorf("pool picks %v, %v; want x[::%d]", out[1], out[d], r)
	}
}

// TestHeadGradient checks the pFedMoAP logits with respect to the raw text
// features and the gate's weights, with and without experts.
func TestHeadGradient(t *testing.T) {
	const D, H, B, C, E, K = 4, 2, 3, 4, 8, 2
	rng := rand.New(rand.NewPCG(15, 16))
	for _, k := range []int{K, 0} {
		g, err := NewGate(D, H, 10, rng)
		if err != nil {
			t.Fatal(err)
		}
		h := Head{Gate: g, Lambda: 0.5}
		img := gradcheck.Rand(rng, B*E, 1)
		txt := gradcheck.Rand(rng, C*E, 1)
		experts := gradcheck.Rand(rng, k*C*D, 0.5)
		r := gradcheck.Rand(rng, B*C, 1)
		if _, err := h.Forward(img, txt, B, C, E, experts, 0.5); err != nil {
			t.Fatal(err)
		}
		g.ZeroGrad()
		dtxt := slices.Clone(h.Backward(r))
		loss := func() float64 {
			l, err := h.Forward(img, txt, B, C, E, experts, 0.5)
			if err != nil {
				t.Fatal(err)
			}
			return gradcheck.Dot(l, r)
		}
		if err := gradcheck.Check("text features", txt, dtxt, loss, 1e-2, 1e-2, C*E, rng); err != nil {
			t.Errorf("%d experts: %v", k, err)
		}
		if k == 0 {
			continue
		}
		checkGate(t, g, loss, rng)
	}
}

// checkGate checks the gate's weight gradients by finite differences; W_k's
// bias, which cannot change a softmax over keys, must have a gradient of
// float32 noise only (its finite differences are noise too).
func checkGate(t *testing.T, g *Gate, loss func() float64, rng *rand.Rand) {
	t.Helper()
	var gmax float64
	for _, name := range gateNames {
		gmax = math.Max(gmax, maxAbs(g.G[name].Data))
	}
	for _, name := range gateNames {
		if name == "gating.W_k.bias" {
			if m := maxAbs(g.G[name].Data); m > 1e-5*gmax {
				t.Errorf("%s: gradient %.3g, want ≈ 0 (largest gradient %.3g)", name, m, gmax)
			}
			continue
		}
		if err := gradcheck.Check(name, g.P[name].Data, g.G[name].Data, loss, 1e-2, 1e-2, 32, rng); err != nil {
			t.Error(err)
		}
	}
}

func TestNearest(t *testing.T) {
	pool := [][]float32{{0, 0}, {3, 4}, nil, {1, 0}, {0, 1}, {0, -5}}
	ids, dist, err := Nearest(pool, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	// 3 and 4 tie at 1 (lower id first), then 1 and 5 tie at 5
	if !slices.Equal(ids, []int{3, 4, 1}) {
		t.Errorf("nearest %v, want [3 4 1]", ids)
	}
	if dist[1] != 5 || !math.IsNaN(dist[2]) || dist[0] != 0 {
		t.Errorf("distances %v", dist)
	}
	if ids, _, _ := Nearest(pool, 0, 10); len(ids) != 4 || slices.Contains(ids, 0) || slices.Contains(ids, 2) {
		t.Errorf("all others: %v", ids)
	}
	if _, _, err := Nearest(pool, 2, 1); err == nil {
		t.Error("client without an entry accepted")
	}
}

func TestRandom(t *testing.T) {
	perm := Permutation(6, 42)
	if p2 := Permutation(6, 42); !slices.Equal(perm, p2) {
		t.Fatalf("permutation not reproducible: %v, %v", perm, p2)
	}
	sorted := slices.Sorted(slices.Values(perm))
	if !slices.Equal(sorted, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("not a permutation: %v", perm)
	}
	pool := [][]float32{{0}, {1}, nil, {3}, {4}, {5}}
	ids := Random(pool, 1, 3, perm)
	var want []int
	for _, j := range perm {
		if j != 1 && j != 2 && len(want) < 3 {
			want = append(want, j)
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("random %v, want %v (perm %v)", ids, want, perm)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for key, mod := range map[string]func(*Config){
		"n_ctx":            func(c *Config) { c.NCtx = 0 },
		"gating_heads":     func(c *Config) { c.GateHeads = 3 },
		"gating_embed_dim": func(c *Config) { c.GateWidth = 0 },
		"scaling":          func(c *Config) { c.Scaling = 0 },
		"lambda":           func(c *Config) { c.Lambda = -1 },
		"num_experts":      func(c *Config) { c.NumExperts = 0 },
		"gating_lr":        func(c *Config) { c.GateLR = 0 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming it", key, err)
		}
	}
	c := DefaultConfig()
	if err := c.ValidateClients(5); err == nil || !strings.Contains(err.Error(), "num_experts") {
		t.Errorf("10 experts for 5 clients: %v", err)
	}
	if c.Experts(5) != 4 || c.Experts(30) != 9 {
		t.Errorf("Experts(5) = %d, Experts(30) = %d", c.Experts(5), c.Experts(30))
	}
}

// TestFirstTimeIsCoOp checks that without experts the logits are plain CLIP
// cosine logits and the gate gets no gradient.
func TestFirstTimeIsCoOp(t *testing.T) {
	m := paritytest.Model(t)
	ref, meta := paritytest.Read(t, "../../testdata/pfedmoap/step.safetensors")
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := prompt.Ints(ref, "tokens")
	labels, _ := prompt.Ints(ref, "labels")
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	img := ref["image_features"].Data
	_, logits, err := l.Step(img, labels)
	if err != nil {
		t.Fatal(err)
	}
	want := clip.Logits(img, l.txt, len(labels), l.C, l.E, l.LogitScale)
	for i := range want {
		if math.Abs(float64(logits[i]-want[i])) > 1e-4*math.Abs(float64(want[i]))+1e-5 {
			t.Fatalf("logit %d = %v, CoOp %v", i, logits[i], want[i])
		}
	}
	for name, g := range l.gate.G {
		if maxAbs(g.Data) != 0 {
			t.Errorf("%s has a gradient without experts", name)
		}
	}
}

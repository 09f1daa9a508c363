package fedtpg

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

const td = paritytest.Testdata + "fedtpg/"

// load reads a fixture as `pfedmma step` / `round` does.
func load(t *testing.T, params string, batches ...string) *parity.Fixture {
	t.Helper()
	var paths []string
	for _, b := range batches {
		paths = append(paths, td+b)
	}
	f, err := parity.Load(paritytest.Model(t), td+params, paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// forwardTol is the fixtures README's tolerance of a tensor name: forward
// quantities 1e-5, gradients and parameters 1e-4 (scale-relative).
func forwardTol(name string) float64 {
	for _, p := range []string{"grad.", "step1.", ".trained.", ".momentum.", "global."} {
		if strings.HasPrefix(name, p) || strings.Contains(name, p) {
			return 1e-4
		}
	}
	return 1e-5
}

// spacing is one float32 spacing at the largest magnitude of x.
func spacing(x []float32) float64 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return float64(math.Nextafter32(m, float32(math.Inf(1))) - m)
}

// checkUpdate compares the update p − init with the reference's:
// max|Δ| ≤ 1e-4·max|ref update| + steps float32 spacings of max|p| (the
// fixtures README: the stored float32 values resolve small updates of
// LayerNorm weights ≈ 1 only to that).
func checkUpdate(t *testing.T, name string, got, want, init []float32, steps int) {
	t.Helper()
	var maxU, maxD float64
	for i := range want {
		u := float64(want[i] - init[i])
		maxU = math.Max(maxU, math.Abs(u))
		maxD = math.Max(maxD, math.Abs(float64(got[i]-init[i])-u))
	}
	tol := 1e-4*maxU + float64(steps)*spacing(want)
	if !(maxD <= tol) {
		t.Errorf("%s update: max|Δ| %.3g > %.3g (max|update| %.3g)", name, maxD, tol, maxU)
	}
	if maxU == 0 {
		t.Errorf("%s: the reference does not move", name)
	}
}

// compare checks every tensor of want that out also names (and fails on
// missing ones), returning how many were compared.
func compare(t *testing.T, out tensor.Named, ref *parity.Fixture, skip func(string) bool) int {
	t.Helper()
	n := 0
	for name, w := range ref.Batch {
		if skip(name) {
			continue
		}
		g, ok := out[name]
		if !ok {
			t.Errorf("no %s produced", name)
			continue
		}
		if !tensor.SameShape(g.Shape, w.Shape) {
			t.Errorf("%s: shape %v, want %v", name, g.Shape, w.Shape)
			continue
		}
		paritytest.Close(t, name, g.Data, w.Data, forwardTol(name))
		n++
	}
	return n
}

func TestStepFixtures(t *testing.T) {
	for _, c := range []struct{ init, step string }{{"init.safetensors", "step.safetensors"}, {"init_rand.safetensors", "step_rand.safetensors"}} {
		t.Run(c.step, func(t *testing.T) {
			f := load(t, c.init, c.step)
			// the images are encoded here: drop what the file holds of the
			// outputs so that nothing is read back
			for name := range f.Batch {
				if name != "images" {
					delete(f.Batch, name)
				}
			}
			out, err := Method{}.Step(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			ref := load(t, c.init, c.step)
			n := compare(t, out, ref, func(name string) bool { return name == "images" })
			if n != 2*17+9 {
				t.Errorf("compared %d tensors", n)
			}
			for name, init := range f.Params {
				checkUpdate(t, name, out["step1."+name].Data, ref.Batch["step1."+name].Data, init.Data, 1)
			}
		})
	}
}

// TestRoundFixture runs the round through parity.Round (the production
// clients, the uniform mean, the Coordinator) and compares every client's
// trained generator, its momentum and the global one, and their updates.
func TestRoundFixture(t *testing.T) {
	f := load(t, "init.safetensors", "round.safetensors")
	out, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	ref := load(t, "init.safetensors", "round.safetensors")
	n := compare(t, out, ref, func(name string) bool {
		return !strings.Contains(name, ".trained.") && !strings.Contains(name, ".momentum.") && !strings.HasPrefix(name, "global.")
	})
	if n != 5*17 {
		t.Errorf("compared %d tensors, want 85", n)
	}
	steps := map[string]int{"client0": 2, "client1": 1, "global": 3}
	for name, init := range f.Params {
		for who, k := range steps {
			key := who + ".trained." + name
			if who == "global" {
				key = "global." + name
			}
			checkUpdate(t, key, out[key].Data, ref.Batch[key].Data, init.Data, k)
		}
	}
	// uniform mean of the two clients, not 8/12 and 4/12
	for name := range f.Params {
		a, b, g := out["client0.trained."+name].Data, out["client1.trained."+name].Data, out["global."+name].Data
		for i := range g {
			if d := math.Abs(float64(g[i] - (a[i]+b[i])/2)); d > 1e-6*(1+math.Abs(float64(g[i]))) {
				t.Fatalf("global %s[%d] = %g, not the uniform mean %g", name, i, g[i], (a[i]+b[i])/2)
			}
		}
	}
}

// TestFixtureSettings: the metadata's settings, and bad ones refused naming
// the key.
func TestFixtureSettings(t *testing.T) {
	f := load(t, "init.safetensors", "round.safetensors")
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	if s := sec.(*Settings); s.NCtx != 4 || s.Depth != 0 || s.WeightedMean {
		t.Errorf("settings %+v", s)
	}
	for _, c := range []struct{ set, want string }{
		{"d_ctx=2", "d_ctx"}, {"prompt_dim=512", "prompt_dim"}, {"textemb_dim=128", "textemb_dim"},
		{"n_ctx=1.5", "n_ctx"}, {"weighted_mean=maybe", "weighted_mean"}, {"cross_heads=3", "cross_heads"},
	} {
		g, err := parity.Load(f.Model, td+"init.safetensors", []string{td + "step.safetensors"}, []string{c.set})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Method{}.Step(context.Background(), g)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: error %v, want one naming %s", c.set, err, c.want)
		}
	}
	g, err := parity.Load(f.Model, td+"init.safetensors", []string{td + "step.safetensors"}, []string{"weighted_mean=true"})
	if err != nil {
		t.Fatal(err)
	}
	if sec, err := (Method{}).SettingsFrom(g); err != nil || !sec.(*Settings).WeightedMean {
		t.Errorf("weighted_mean=true: %v", err)
	}
}

// TestRoundBatchLosses replays each client of the round fixture with the
// learner (its classes' prompt and name rows, batches of 4 in order, a
// fresh SGD) and compares every batch's loss with clientN.batch_losses.
func TestRoundBatchLosses(t *testing.T) {
	f := load(t, "init.safetensors", "round.safetensors")
	s := fromConfig(DefaultConfig())
	const L = 77
	for i := 0; i < 2; i++ {
		pre := "client" + string(rune('0'+i)) + "."
		var tokens, names []int
		for _, c := range f.Ints[pre+"classes"] {
			tokens = append(tokens, f.Ints["tokens"][c*L:(c+1)*L]...)
			names = append(names, f.Ints["name_tokens"][c*L:(c+1)*L]...)
		}
		l, err := fixtureLearner(f, s, tokens, names)
		if err != nil {
			t.Fatal(err)
		}
		px, labels := f.Batch[pre+"images"], f.Ints[pre+"labels"]
		img := f.Model.EncodeImage(px.Data, len(labels))
		opt := optim.NewSGD(0.9, 1e-5, false)
		want := f.Batch[pre+"batch_losses"].Data
		got := make([]float32, len(want))
		for b := range want {
			loss, _, _, err := l.Step(img[b*4*l.Emb:(b+1)*4*l.Emb], labels[b*4:(b+1)*4])
			if err != nil {
				t.Fatal(err)
			}
			got[b] = float32(loss)
			if err := opt.Step(0.003, prompt.OptimParams(l.Params(), l.Grads())); err != nil {
				t.Fatal(err)
			}
		}
		paritytest.Close(t, pre+"batch_losses", got, want, 1e-5)
	}
}

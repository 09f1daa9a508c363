package plot

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
)

const dir = paritytest.Testdata + "plot/"

// tol is the fixture README's scale-relative tolerance of an output.
func tol(name string) float64 {
	switch name {
	case "image_features", "text_features", "logits", "loss":
		return 1e-5
	}
	return 1e-4 // plan, gradients, step1
}

// TestStepFixtures runs `pfedmma step` (the production client's step plus
// the recorded features) on the authors' step (local logits only) and
// their ImageNet branch (the global logit added) and compares every output
// and the update step1 − init with theirs; the Sinkhorn iteration count
// equals theirs.
func TestStepFixtures(t *testing.T) {
	m := paritytest.Model(t)
	for _, file := range []string{"step", "step_imagenet"} {
		t.Run(file, func(t *testing.T) {
			f, err := parity.Load(m, dir+"init.safetensors", []string{dir + file + ".safetensors"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := paritytest.Read(t, dir+file+".safetensors")
			init := f.Params[ParamCtx]
			out, err := Method{}.Step(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"image_features", "text_features", "plan", "logits", "loss", "grad." + ParamCtx, "step1." + ParamCtx} {
				if out[name] == nil {
					t.Fatalf("the step outputs no %s", name)
				}
				paritytest.RelValues(t, name, out[name].Data, ref[name].Data, tol(name))
			}
			paritytest.RelValues(t, "update", paritytest.UpdateValues(out["step1."+ParamCtx].Data, init.Data),
				paritytest.UpdateValues(ref["step1."+ParamCtx].Data, init.Data), 1e-4)
			checkIterations(t, f)
		})
	}
}

// checkIterations: the Sinkhorn stops after the reference's iteration
// count (metadata ot_iterations) on the step batch.
func checkIterations(t *testing.T, f *parity.Fixture) {
	t.Helper()
	want, err := strconv.Atoi(f.Meta["ot_iterations"])
	if err != nil {
		t.Fatalf("metadata ot_iterations: %v", err)
	}
	cfg, err := ConfigFromMeta(f.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := features(f, cfg); err != nil {
		t.Fatal(err)
	}
	l := learnerOf(t, f, cfg)
	labels, _ := f.IntsOf("labels")
	img := f.Model.EncodeImageTokens(f.Batch["images"].Data, len(labels))
	if _, _, err := l.Step(img, labels); err != nil {
		t.Fatal(err)
	}
	if got := l.Iterations(); got != want {
		t.Errorf("Sinkhorn iterations %d, theirs %d", got, want)
	}
}

// learnerOf is a learner on f's class prompts holding f.Params.
func learnerOf(t *testing.T, f *parity.Fixture, cfg Config) *Learner {
	t.Helper()
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(f.Model, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := prompt.Load(l.Params(), f.Params); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRoundFixture runs `pfedmma round` (the production clients and
// federation.Coordinator) on the authors' round of two clients and
// compares each client's batch losses, trained contexts and the server's
// average (values and updates).
func TestRoundFixture(t *testing.T) {
	out := paritytest.Round(t, Method{}, "plot/init.safetensors", []string{"plot/round.safetensors"}, nil, "plot/round.safetensors", 1e-4)
	ref, _ := paritytest.Read(t, dir+"round.safetensors")
	for _, c := range []string{"client0.", "client1."} {
		if out[c+"batch_losses"] == nil {
			t.Fatalf("the round reports no %sbatch_losses", c)
		}
		paritytest.Rel(t, c+"batch_losses", out[c+"batch_losses"], ref[c+"batch_losses"], 1e-5)
	}
}

// TestStepGradient checks the whole step (text encoder, local and global
// heads) with respect to the contexts by central finite differences of
// the loss with the plan held fixed (the reference's plan, so the oracle
// is outside the solver), on the ImageNet step.
func TestStepGradient(t *testing.T) {
	m := paritytest.Model(t)
	f, err := parity.Load(m, dir+"init.safetensors", []string{dir + "step_imagenet.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMeta(f.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.GlobalLogit {
		t.Fatal("the ImageNet step does not turn the global branch on")
	}
	l := learnerOf(t, f, cfg)
	labels, _ := f.IntsOf("labels")
	img := m.EncodeImageTokens(f.Batch["images"].Data, len(labels))
	if _, _, err := l.Step(img, labels); err != nil {
		t.Fatal(err)
	}
	grad := append([]float32(nil), l.grad.Data...)
	plan := append([]float32(nil), l.Plan()...)
	loss := func() float64 {
		if err := l.textForward(false); err != nil {
			t.Fatal(err)
		}
		return fixedPlanLoss(l.TextFeatures(), img, labels, plan, cfg.N, l.C, l.E, float64(l.LogitScale), cfg.GlobalLogit)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	if err := gradcheck.Check("contexts", l.ctx.Data, grad, loss, 1e-2, 2e-2, 24, rng); err != nil {
		t.Error(err)
	}
}

// fixedPlanLoss is the oracle of the forward in float64, written from the
// paper and the fixture README: sim = ⟨local token m of image b, text of
// prompt n for class c⟩ (both normalised), logits = e^s·Σ plan·sim (+
// e^s·cos(global token, mean over the N raw text features) with global),
// mean cross entropy; the plan is given.
func fixedPlanLoss(txt, img []float32, labels []int, plan []float32, N, C, E int, scale float64, global bool) float64 {
	B := len(labels)
	T := len(img) / (B * E)
	M := T - 1
	unit := func(v []float64) []float64 {
		var s float64
		for _, x := range v {
			s += x * x
		}
		s = math.Sqrt(s)
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = x / s
		}
		return out
	}
	row := func(x []float32, i int) []float64 {
		out := make([]float64, E)
		for k := range out {
			out[k] = float64(x[i*E+k])
		}
		return out
	}
	dot := func(a, b []float64) float64 {
		var s float64
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	var loss float64
	for b := 0; b < B; b++ {
		logits := make([]float64, C)
		for c := 0; c < C; c++ {
			for m := 0; m < M; m++ {
				p := unit(row(img, b*T+1+m))
				for n := 0; n < N; n++ {
					logits[c] += float64(plan[((b*C+c)*M+m)*N+n]) * dot(p, unit(row(txt, n*C+c)))
				}
			}
			if global {
				mean := make([]float64, E)
				for n := 0; n < N; n++ {
					for k, x := range row(txt, n*C+c) {
						mean[k] += x / float64(N)
					}
				}
				logits[c] += dot(unit(row(img, b*T)), unit(mean))
			}
			logits[c] *= math.Exp(scale)
		}
		mx := logits[0]
		for _, v := range logits {
			mx = math.Max(mx, v)
		}
		var z float64
		for _, v := range logits {
			z += math.Exp(v - mx)
		}
		loss += mx + math.Log(z) - logits[labels[b]]
	}
	return loss / float64(B)
}

// TestConfigFromMetaRefusals: fixture metadata PLOT's code cannot run
// (csc, the class token in the middle or front) or that is out of range is
// refused with an error naming the key; dataset ImageNet turns the global
// branch on and global_logit overrides it.
func TestConfigFromMetaRefusals(t *testing.T) {
	_, base := paritytest.Read(t, dir+"step.safetensors")
	for key, val := range map[string]string{"csc": "True", "class_token_position": "middle", "n_prompts": "0", "eps": "-1", "max_iter": "x", "global_logit": "maybe"} {
		meta := maps.Clone(base)
		meta[key] = val
		_, err := ConfigFromMeta(meta)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: error %v, want one naming %q", key, val, err, key)
		}
	}
	for _, c := range []struct {
		dataset, global string
		want            bool
	}{{"Caltech101", "", false}, {"ImageNet", "", true}, {"ImageNet", "false", false}, {"Caltech101", "true", true}} {
		meta := maps.Clone(base)
		meta["dataset"] = c.dataset
		if c.global != "" {
			meta["global_logit"] = c.global
		}
		cfg, err := ConfigFromMeta(meta)
		if err != nil || cfg.GlobalLogit != c.want {
			t.Errorf("dataset %s, global_logit %q: GlobalLogit %v (%v), want %v", c.dataset, c.global, cfg.GlobalLogit, err, c.want)
		}
	}
}

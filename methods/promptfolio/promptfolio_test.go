package promptfolio

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods/promptfl"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

const td = "../../testdata/promptfolio/"

// tolFor is paritytest.Tol with the next round's parameters (next.*)
// among the trained outputs.
func tolFor(name string) float64 {
	if strings.Contains(name, "next.") {
		return 1e-4
	}
	return paritytest.Tol(name)
}

// TestStepFixtures reproduces every step file (θ 0.4, 0 and 1): features,
// the mix, logits, loss, gradient, the step and its update; the gradient
// of the prompt whose weight is 0 is exactly 0.
func TestStepFixtures(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, td+"init.safetensors")
	for _, file := range []string{"step", "step_theta0", "step_theta1"} {
		t.Run(file, func(t *testing.T) {
			ref, meta := paritytest.Read(t, td+file+".safetensors")
			out, err := StepFromFile(m, init, ref, meta)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"image_features", "text_features", "text_features_mixed", "logits", "loss", "grad." + ParamCtx, "step1." + ParamCtx} {
				g, ok := out[name]
				if !ok {
					t.Fatalf("no %s", name)
				}
				if !tensor.SameShape(g.Shape, ref[name].Shape) {
					t.Errorf("%s: shape %v, want %v", name, g.Shape, ref[name].Shape)
				}
				paritytest.RelValues(t, name, g.Data, ref[name].Data, tolFor(name))
			}
			paritytest.RelValues(t, "update", paritytest.UpdateValues(out["step1."+ParamCtx].Data, init[ParamCtx].Data), paritytest.UpdateValues(ref["step1."+ParamCtx].Data, init[ParamCtx].Data), 1e-4)
			half := len(init[ParamCtx].Data) / 2
			g := out["grad."+ParamCtx].Data
			for p, part := range [][]float32{g[:half], g[half:]} {
				var zero, refZero = true, true
				for i, v := range part {
					zero = zero && v == 0
					refZero = refZero && ref["grad."+ParamCtx].Data[p*half+i] == 0
				}
				if zero != refZero {
					t.Errorf("prompt %d: gradient all zero %v, reference %v", p, zero, refZero)
				}
			}
		})
	}
}

// TestReducesToPromptFLAndCoOp: at θ = 0 the loss, logits and the global
// prompt's gradient are PromptFL's with that prompt as its context; at θ = 1
// they are CoOp's (PromptFL's learner, trained locally) with the local
// prompt. The other prompt's gradient is exactly 0.
func TestReducesToPromptFLAndCoOp(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, td+"init.safetensors")
	ref, meta := paritytest.Read(t, td+"step.safetensors")
	tokens, _ := prompt.Ints(ref, "tokens")
	labels, _ := prompt.Ints(ref, "labels")
	img, _, err := prompt.ImageFeatures(m, ref, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	ctx := init[ParamCtx]
	n := len(ctx.Data) / 2
	for p, theta := range []float64{0, 1} {
		cfg.Theta = theta
		l, err := New(m, tokens, cfg)
		if err != nil {
			t.Fatal(err)
		}
		copy(l.ctx.Data, ctx.Data)
		loss, _, logits, err := l.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := promptfl.New(m, tokens, promptfl.Config{NCtx: cfg.NCtx})
		if err != nil {
			t.Fatal(err)
		}
		copy(pl.Params()[promptfl.ParamCtx].Data, ctx.Data[p*n:(p+1)*n])
		wantLoss, _, wantLogits, err := pl.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(loss-wantLoss) > 1e-5*math.Abs(wantLoss) {
			t.Errorf("θ=%v: loss %v, PromptFL/CoOp %v", theta, loss, wantLoss)
		}
		paritytest.RelValues(t, "logits", logits, wantLogits, 1e-5)
		g := l.grad.Data
		paritytest.RelValues(t, "gradient of the trained prompt", g[p*n:(p+1)*n], pl.Grads()[promptfl.ParamCtx].Data, 1e-4)
		for i, v := range g[(1-p)*n : (2-p)*n] {
			if v != 0 {
				t.Fatalf("θ=%v: the other prompt's gradient [%d] = %g, want exactly 0", theta, i, v)
			}
		}
	}
}

// TestMixHeadGrad: finite differences of the loss of the mixed head with
// respect to the raw text features, at θ in (0, 1).
func TestMixHeadGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const B, C, E = 5, 4, 12
	img, txt := gradcheck.Rand(rng, B*E, 1), gradcheck.Rand(rng, 2*C*E, 1)
	labels := []int{0, 3, 1, 2, 2}
	var h mixHead
	dl := make([]float32, B*C)
	loss := func() float64 {
		return clip.CrossEntropy(h.Forward(img, txt, B, C, E, 0.3, 1.5), labels, B, C, dl)
	}
	loss()
	grad := append([]float32(nil), h.Backward(dl)...)
	if err := gradcheck.Check("text features", txt, grad, loss, 1e-3, 1e-2, 2*C*E, rng); err != nil {
		t.Error(err)
	}
	// not renormalised: |t_c| < 1 unless the two prompts agree
	h.Mix(txt, C, E, 0.5)
	var nrm float64
	for _, v := range h.t[:E] {
		nrm += float64(v) * float64(v)
	}
	if !(math.Sqrt(nrm) < 0.999) {
		t.Errorf("|t_0| = %v: the mix was renormalised", math.Sqrt(nrm))
	}
}

// TestConfigFromMeta: θ is read from theta or frac; missing or bad
// settings are named.
func TestConfigFromMeta(t *testing.T) {
	c, err := ConfigFromMeta(map[string]string{"n_ctx": "4", "frac": "0.7"})
	if err != nil || c.NCtx != 4 || c.Theta != 0.7 {
		t.Fatalf("%+v %v", c, err)
	}
	for _, tc := range []struct {
		meta map[string]string
		want string
	}{
		{map[string]string{"frac": "0.4"}, "n_ctx"},
		{map[string]string{"n_ctx": "8"}, "frac"},
		{map[string]string{"n_ctx": "8", "theta": "1.5"}, "theta"},
		{map[string]string{"n_ctx": "8", "theta": "0.4", "num_prompt": "3"}, "num_prompt"},
	} {
		if _, err := ConfigFromMeta(tc.meta); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.meta, err, tc.want)
		}
	}
}

// TestWeightDecay checks the decay on its own (the fixtures barely see it):
// at θ = 0 the local prompt has no gradient, so one step of a fresh SGD
// moves it by exactly −lr·wd·p; and a step with weight decay wd differs from
// the step without by −lr·wd·p in both prompts.
func TestWeightDecay(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, td+"init.safetensors")
	ref, meta := paritytest.Read(t, td+"step_theta0.safetensors")
	lr, _ := prompt.MetaFloat(meta, "lr")
	wd, _ := prompt.MetaFloat(meta, "weight_decay")
	out, err := StepFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	p := init[ParamCtx].Data
	half := len(p) / 2
	// per entry, within 2 float32 ulps of p (the decay itself is lr·wd·|p| =
	// 1e-6·|p|, about 8 ulps)
	for i, got := range out["step1."+ParamCtx].Data[half:] {
		x := float64(p[half+i])
		if d := math.Abs(float64(got) - x*(1-lr*wd)); d > 0x1p-22*math.Abs(x) {
			t.Fatalf("θ=0: local prompt [%d] steps to %g, want p·(1 − lr·wd) = %g", i, got, x*(1-lr*wd))
		}
	}

	paritytest.WeightDecay(t, td, StepFromFile, ParamCtx)
}

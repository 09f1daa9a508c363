package fedotp

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/ot"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// tolFor is paritytest.Tol with the next round's parameters (next.*) and the transport plan
// among the trained outputs.
func tolFor(name string) float64 {
	if name == "plan" || strings.Contains(name, "next.") {
		return 1e-4
	}
	return paritytest.Tol(name)
}

func TestStepFixtures(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/fedotp/init.safetensors")
	for _, file := range []string{"step", "step_sinkhorn", "step_eps001"} {
		t.Run(file, func(t *testing.T) {
			ref, meta := paritytest.Read(t, "../../testdata/fedotp/"+file+".safetensors")
			batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "images": ref["images"]}
			out, err := StepFromFile(m, init, batch, meta)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"image_features", "text_features", "plan", "logits", "loss", "grad." + ParamCtx, "step1." + ParamCtx} {
				paritytest.Rel(t, name, out[name], ref[name], tolFor(name))
			}
			paritytest.Rel(t, "update", paritytest.Update(out["step1."+ParamCtx], init[ParamCtx]), paritytest.Update(ref["step1."+ParamCtx], init[ParamCtx]), 1e-4)
		})
	}
}

func TestRoundFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/fedotp/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/fedotp/round.safetensors")
	batch := tensor.Named{}
	for name, v := range ref {
		if name == "tokens" || strings.HasSuffix(name, ".images") || strings.HasSuffix(name, ".labels") {
			batch[name] = v
		}
	}
	out, err := RoundFromFile(m, init, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range ref {
		if name == "tokens" || strings.HasSuffix(name, ".images") || strings.HasSuffix(name, ".labels") {
			continue
		}
		paritytest.Rel(t, name, out[name], want, tolFor(name))
		if strings.HasSuffix(name, ParamCtx) {
			base := init[ParamCtx]
			if strings.HasPrefix(name, "global.") {
				p, _ := GlobalPart(init, 1)
				base = p[ParamCtx]
			}
			paritytest.Rel(t, name+" update", paritytest.Update(out[name], base), paritytest.Update(want, base), 1e-4)
		}
	}
}

// TestHeadGradient checks the OT-weighted logits' gradient with respect to
// the raw text features, the plan held fixed, by finite differences (float32
// forward, so a loose step), for COT and Sinkhorn.
func TestHeadGradient(t *testing.T) {
	const B, T, N, C, E = 2, 5, 2, 3, 6
	rng := rand.New(rand.NewPCG(7, 8))
	for _, method := range []string{ot.COT, ot.Sinkhorn} {
		img := gradcheck.Rand(rng, B*T*E, 1)
		txt := gradcheck.Rand(rng, N*C*E, 1)
		r := gradcheck.Rand(rng, B*C, 1)
		h := Head{OT: ot.Config{Method: method, Eps: 0.1, Thresh: 1e-3, MaxIter: 100, TopPercent: 0.8}}
		if _, err := h.Forward(img, B, T, txt, N, C, E, 1); err != nil {
			t.Fatal(err)
		}
		dtxt := append([]float32(nil), h.Backward(r)...)
		h.keepPlan = true
		loss := func() float64 {
			l, err := h.Forward(img, B, T, txt, N, C, E, 1)
			if err != nil {
				t.Fatal(err)
			}
			return gradcheck.Dot(l, r)
		}
		if err := gradcheck.Check(method+" text features", txt, dtxt, loss, 1e-2, 1e-2, 50, rng); err != nil {
			t.Error(err)
		}
	}
}

// TestStepGradient checks the whole step (text encoder included) with
// respect to the contexts by finite differences on the tiny model, with the
// plan held fixed.
func TestStepGradient(t *testing.T) {
	checkStepGradient(t, "../../testdata/fedotp/step.safetensors")
}

// checkStepGradient is TestStepGradient on the settings, rows and image
// features of the step file path.
func checkStepGradient(t *testing.T, path string) {
	m := paritytest.Model(t)
	ref, meta := paritytest.Read(t, path)
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := prompt.Ints(ref, "tokens")
	labels, _ := prompt.Ints(ref, "labels")
	cfg.Seed, cfg.InitStd = 3, 0.2
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	img := ref["image_features"].Data
	if _, _, err := l.Step(img, labels); err != nil {
		t.Fatal(err)
	}
	grad := l.grad.Clone()
	l.head.keepPlan = true
	dl := make([]float32, len(labels)*l.C)
	loss := func() float64 {
		txt, err := l.enc.Forward(l.ctx.Data, cfg.NumPrompt, false)
		if err != nil {
			t.Fatal(err)
		}
		l.txt = txt
		logits, err := l.forwardHead(img, len(labels))
		if err != nil {
			t.Fatal(err)
		}
		return clip.CrossEntropy(logits, labels, len(labels), l.C, dl)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	if err := gradcheck.Check("ctx", l.ctx.Data, grad.Data, loss, 1e-2, 2e-2, 30, rng); err != nil {
		t.Error(err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for key, mod := range map[string]func(*Config){
		"n_ctx":       func(c *Config) { c.NCtx = 0 },
		"num_prompt":  func(c *Config) { c.NumPrompt = 0 },
		"avg_prompt":  func(c *Config) { c.AvgPrompt = 3 },
		"eps":         func(c *Config) { c.OT.Eps = 0 },
		"top_percent": func(c *Config) { c.OT.TopPercent = 0 },
		"ot":          func(c *Config) { c.OT.Method = "UOT" },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming it", key, err)
		}
	}
}

// TestNoNaNAtSmallEps runs steps at ε 0.01 and 0.1 on random contexts.
func TestNoNaNAtSmallEps(t *testing.T) {
	m := paritytest.Model(t)
	ref, _ := paritytest.Read(t, "../../testdata/fedotp/step.safetensors")
	tokens, _ := prompt.Ints(ref, "tokens")
	labels, _ := prompt.Ints(ref, "labels")
	for _, eps := range []float64{0.01, 0.1} {
		cfg := DefaultConfig()
		cfg.NCtx, cfg.OT.Eps = 4, eps
		l, err := New(m, tokens, cfg)
		if err != nil {
			t.Fatal(err)
		}
		loss, logits, err := l.Step(ref["image_features"].Data, labels)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range append(append([]float32{float32(loss)}, logits...), l.grad.Data...) {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("ε %v: non-finite value %v", eps, v)
			}
		}
	}
}

func TestGlobalParts(t *testing.T) {
	own := tensor.Named{ParamCtx: {Shape: []int{2, 1, 2}, Data: []float32{1, 2, 3, 4}}}
	g, err := GlobalPart(own, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := g[ParamCtx].Data; len(d) != 2 || d[0] != 1 || d[1] != 2 {
		t.Fatalf("global part %v", d)
	}
	g[ParamCtx].Data[0] = 9
	next, err := WithGlobal(own, g)
	if err != nil {
		t.Fatal(err)
	}
	if d := next[ParamCtx].Data; d[0] != 9 || d[1] != 2 || d[2] != 3 || d[3] != 4 || own[ParamCtx].Data[0] != 1 {
		t.Fatalf("next %v, own %v", d, own[ParamCtx].Data)
	}
	if _, err := WithGlobal(own, tensor.Named{ParamCtx: tensor.New(1, 1, 3)}); err == nil {
		t.Error("mismatched global accepted")
	}
}

package prograd

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

const dir = "../../testdata/prograd/"

// stepFiles are the reference steps: the conflicting (projected) branch at
// the authors' T 1 / λ 1, the agreeing branch, and T 2 / λ 0.5.
var stepFiles = []string{"step.safetensors", "step_aligned.safetensors", "step_t2.safetensors"}

// bare builds the learner of a step file from init and runs its Step on the
// images' features (computed by the frozen encoder, not read back).
func bare(t *testing.T, file string) (*Learner, tensor.Named, tensor.Named, []float32, []int) {
	t.Helper()
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+file)
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := prompt.Ints(ref, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	template, err := prompt.Ints(ref, "template_tokens")
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tokens, template, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := prompt.Load(l.Params(), init); err != nil {
		t.Fatal(err)
	}
	img, _, err := prompt.ImageFeatures(m, tensor.Named{"images": ref["images"]}, "")
	if err != nil {
		t.Fatal(err)
	}
	labels, err := prompt.Ints(ref, "labels")
	if err != nil {
		t.Fatal(err)
	}
	return l, init, ref, img, labels
}

// TestStepFixture checks the learner's forward, both losses, both
// gradients, their cosine, the branch and the update direction against
// the authors' code, on the three reference steps.
func TestStepFixture(t *testing.T) {
	for _, file := range stepFiles {
		t.Run(file, func(t *testing.T) {
			l, _, ref, img, labels := bare(t, file)
			loss, terms, logits, err := l.Step(img, labels)
			if err != nil {
				t.Fatal(err)
			}
			out := l.Intermediates()
			out["image_features"] = &tensor.Tensor{Shape: ref["image_features"].Shape, Data: img}
			out["logits"] = &tensor.Tensor{Shape: ref["logits"].Shape, Data: logits}
			out["loss"] = prompt.Scalar(loss)
			out["grad."+ParamCtx] = l.grad.Clone()
			for _, name := range []string{"image_features", "text_features", "zs_text_features", "logits", "zs_logits", "loss", "xe_loss", "kl_loss"} {
				paritytest.Rel(t, name, out[name], ref[name], 1e-5)
			}
			for _, name := range []string{"grad_xe.", "grad_kl.", "grad."} {
				paritytest.Rel(t, name+ParamCtx, out[name+ParamCtx], ref[name+ParamCtx], 1e-4)
			}
			if d := math.Abs(terms["cos"] - float64(ref["cos"].Data[0])); d > 1e-5 {
				t.Errorf("cos %v, reference %v (|Δ| %.3g > 1e-5)", terms["cos"], ref["cos"].Data[0], d)
			}
			if terms["projected"] != float64(ref["projected"].Data[0]) {
				t.Errorf("projected %v, reference %v", terms["projected"], ref["projected"].Data[0])
			}
		})
	}
}

// TestStepProductionPath runs `pfedmma step` (parity.LearnerStep: the
// production client, then the bare learner's diagnostics) on the reference
// steps: loss, the update direction, one SGD step and the update p − init,
// the logits, both losses and both gradients.
func TestStepProductionPath(t *testing.T) {
	for _, file := range stepFiles {
		t.Run(file, func(t *testing.T) {
			f, err := parity.Load(paritytest.Model(t), dir+"init.safetensors", []string{dir + file}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := paritytest.Read(t, dir+file)
			delete(f.Batch, "image_features")
			out, err := Method{}.Step(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"loss", "grad." + ParamCtx, "step1." + ParamCtx, "logits", "image_features", "zs_logits", "xe_loss", "kl_loss", "grad_xe." + ParamCtx, "grad_kl." + ParamCtx} {
				tol := paritytest.Tol(name)
				if strings.HasPrefix(name, "grad_") {
					tol = 1e-4
				}
				paritytest.Rel(t, name, out[name], ref[name], tol)
			}
			if out["projected"].Data[0] != ref["projected"].Data[0] {
				t.Errorf("projected %v, reference %v", out["projected"].Data[0], ref["projected"].Data[0])
			}
			init := f.Params[ParamCtx]
			paritytest.Rel(t, "update", paritytest.Update(out["step1."+ParamCtx], init), paritytest.Update(ref["step1."+ParamCtx], init), 1e-4)
		})
	}
}

// TestRoundProductionPath runs the reference round (two clients, client 0
// agreeing, client 1 projected) through parity.RunRound: the production
// client and federation.Coordinator.
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "prograd/init.safetensors", []string{"prograd/round.safetensors"}, nil, "prograd/round.safetensors", 1e-4)
	if _, ok := out["global."+ParamCtx]; !ok {
		t.Error("the server holds no context")
	}
}

// TestGradCheck checks G_ce and G_kd against central differences of their
// own losses along random directions (an oracle outside the fixtures), at
// the conflicting step with T 1 and T 2.
func TestGradCheck(t *testing.T) {
	for _, file := range []string{"step.safetensors", "step_t2.safetensors"} {
		l, _, _, img, labels := bare(t, file)
		if _, _, _, err := l.Step(img, labels); err != nil {
			t.Fatal(err)
		}
		gXe, gKd := append([]float32(nil), l.gXe...), append([]float32(nil), l.gKd...)
		term := func(name string) func() float64 {
			return func() float64 {
				_, terms, _, err := l.Step(img, labels)
				if err != nil {
					t.Fatal(err)
				}
				return terms[name]
			}
		}
		methodtest.Directional(t, file+" xe", l.ctx.Data, gXe, term("loss_xe"), rand.New(rand.NewPCG(3, 1)))
		methodtest.Directional(t, file+" kl", l.ctx.Data, gKd, term("loss_kl"), rand.New(rand.NewPCG(3, 2)))
	}
}

// TestProject checks the projection on vectors worked by hand: the
// conflicting component removed (scaled by λ), agreeing and orthogonal
// gradients and a zero teacher gradient left alone.
func TestProject(t *testing.T) {
	cases := []struct {
		name         string
		xe, kd, want []float32
		lambda       float64
		projected    bool
	}{
		// a·b = −1, |b|² = 2: a − λ(−1/2)b
		{"conflict λ 1", []float32{1, 0}, []float32{-1, 1}, []float32{0.5, 0.5}, 1, true},
		{"conflict λ 0.5", []float32{1, 0}, []float32{-1, 1}, []float32{0.75, 0.25}, 0.5, true},
		{"agree", []float32{1, 0}, []float32{1, 1}, []float32{1, 0}, 1, false},
		{"orthogonal", []float32{1, 0}, []float32{0, 3}, []float32{1, 0}, 1, false},
		{"zero teacher", []float32{1, 2}, []float32{0, 0}, []float32{1, 2}, 1, false},
	}
	for _, c := range cases {
		g := make([]float32, len(c.xe))
		_, p := project(g, c.xe, c.kd, c.lambda)
		if p != c.projected {
			t.Errorf("%s: projected %v, want %v", c.name, p, c.projected)
		}
		for i := range g {
			if math.Abs(float64(g[i]-c.want[i])) > 1e-7 {
				t.Errorf("%s: g %v, want %v", c.name, g, c.want)
				break
			}
		}
	}
}

// TestRoundBatchLosses checks each client's per-batch cross entropy in the
// production round (client.FixtureRound) against the authors' recorded
// losses, and the round's branches: client 0 agreeing, client 1 projected.
func TestRoundBatchLosses(t *testing.T) {
	f, err := parity.Load(paritytest.Model(t), dir+"init.safetensors", []string{dir + "round.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := paritytest.Read(t, dir+"round.safetensors")
	out, err := client.FixtureRound(context.Background(), f, Method{}, clientSpec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"client0.", "client1."} {
		paritytest.Rel(t, c+"batch_losses", out[c+"batch_losses"], ref[c+"batch_xe_losses"], 1e-5)
	}
	if ref["client0.batch_cos"].Data[0] <= 0 || ref["client1.batch_cos"].Data[0] >= 0 {
		t.Fatalf("the round fixture no longer exercises both branches: cos %v, %v", ref["client0.batch_cos"].Data, ref["client1.batch_cos"].Data)
	}
}

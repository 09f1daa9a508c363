package pfedmma

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestInitKaimingFanOut: New draws every weight as PyTorch's
// kaiming_normal_(mode="fan_out", nonlinearity="relu") does for an
// nn.Linear weight [out, in], std = √2/√out, biases 0; a nil generator
// leaves every value 0.
func TestInitKaimingFanOut(t *testing.T) {
	const r, dv, dt = 32, 256, 128
	a := New(Config{Start: 1, End: 2, Dim: r, Scale: 0.005}, dv, dt, rand.New(rand.NewPCG(3, 4)))
	for _, name := range a.Names() {
		p := a.Params[name]
		if strings.HasSuffix(name, ".bias") {
			if slices.ContainsFunc(p.Data, func(v float32) bool { return v != 0 }) {
				t.Errorf("%s: bias not zero", name)
			}
			continue
		}
		var s2 float64
		for _, v := range p.Data {
			s2 += float64(v) * float64(v)
		}
		std := math.Sqrt(s2 / float64(len(p.Data)))
		want := math.Sqrt(2 / float64(p.Shape[0]))
		if math.Abs(std/want-1) > 0.1 {
			t.Errorf("%s %v: std %.4g, want √(2/%d) = %.4g", name, p.Shape, std, p.Shape[0], want)
		}
	}
	z := New(Config{Start: 1, End: 2, Dim: r, Scale: 0.005}, dv, dt, nil)
	for name, p := range z.Params {
		if slices.ContainsFunc(p.Data, func(v float32) bool { return v != 0 }) {
			t.Errorf("%s: nil generator left non-zero values", name)
		}
	}
}

// TestStepRefusesLabels: a label outside 0..C−1 is an error naming it and
// its sample; labels 0 and C−1 are valid.
func TestStepRefusesLabels(t *testing.T) {
	l, step := newLearner(t, fixtures[0])
	images := get(t, step, "images")
	prefix := clip.ImagePrefix(l.Model, fixtures[0].start, images, 2, nil)
	for _, tc := range []struct {
		labels []int
		err    string
	}{
		{[]int{0, 4}, ""},
		{[]int{4, 5}, "label 5 of sample 1 outside 0..4"},
		{[]int{-1, 0}, "label -1 of sample 0 outside 0..4"},
	} {
		l.Adapters.ZeroGrads()
		_, _, err := l.Step(prefix, 2, tc.labels)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("labels %v: %v", tc.labels, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("labels %v: error %v, want %q", tc.labels, err, tc.err)
		}
	}
}

// TestClassPromptsCutAfterLastEOT: for every ℓ ≥ 1 the class prompts run
// only up to the last EOT (the position of each row's largest token id,
// found here by hand); with ℓ = 0 (the embeddings adapted) they run whole.
func TestClassPromptsCutAfterLastEOT(t *testing.T) {
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	tokens := getInts(t, open(t, "../../testdata/mma-l2/step.safetensors"), "tokens")
	ctx := m.W.Config.Text.ContextLength
	C := len(tokens) / ctx
	last := 0
	for c := 0; c < C; c++ {
		row := tokens[c*ctx : (c+1)*ctx]
		last = max(last, slices.Index(row, slices.Max(row)))
	}
	if last+1 >= ctx {
		t.Fatalf("the prompts reach the context length %d: the cut is not visible", ctx)
	}
	for start := 0; start <= 3; start++ {
		a := New(Config{Start: start, End: 4, Dim: 4, Scale: 0.005}, m.W.Config.Vision.Width, m.W.Config.Text.Width, nil)
		l, err := NewLearner(m, a, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Attach()
		if err := l.SetClasses(tokens, C); err != nil {
			t.Fatal(err)
		}
		want := last + 1
		if start == 0 {
			want = ctx
		}
		if l.textT != want || len(l.textPrefix) != C*want*m.W.Config.Text.Width {
			t.Errorf("start %d: prompts of %d tokens (%d values), want %d", start, l.textT, len(l.textPrefix), want)
		}
	}
}

// fixtureEnv is a TensorEnv over the tiny CLIP and fixture dir's class
// prompts with the given clients, and pFedMMA's plan on it (adapters from
// start to block 4, r = 16, α = 0.005, initial adapters init when not nil).
func fixtureEnv(t *testing.T, dir string, start int, clients []parity.TensorClient, opts train.Options, init tensor.Named) (*methods.Env, *methods.Plan) {
	t.Helper()
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	tokens := getInts(t, open(t, "../../testdata/"+dir+"/step.safetensors"), "tokens")
	env, err := parity.TensorEnv(m, start, tokens, len(tokens)/m.W.Config.Text.ContextLength, clients, opts, 11)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	env.Init = init
	plan, err := Method{}.Build(env, &Settings{Start: start, End: 4, Dim: 16, Scale: 0.005, Activation: "relu"})
	if err != nil {
		t.Fatal(err)
	}
	return env, plan
}

// TestFitMetricsMatchReference: one local step on one batch (the mma-l0
// step fixture's six images, reordered) reports the reference's loss and
// the training accuracy of the reference's logits (argmax against the
// labels, counted here), through the production client's Fit.
func TestFitMetricsMatchReference(t *testing.T) {
	step := open(t, "../../testdata/mma-l0/step.safetensors")
	images, labels := get(t, step, "images"), getInts(t, step, "labels")
	logits := get(t, step, "logits")
	B, C := len(labels), len(logits)/len(labels)
	per := len(images) / B
	// an order in which the batch's first rows predict other rows' labels:
	// the count must pair each row of logits with its own label
	order := []int{0, 1, 5, 3, 2, 4}
	var px []float32
	var ys []int
	correct := 0
	for _, k := range order {
		px = append(px, images[k*per:(k+1)*per]...)
		ys = append(ys, labels[k])
		row := logits[k*C : (k+1)*C]
		if slices.Index(row, slices.Max(row)) == labels[k] {
			correct++
		}
	}
	if correct == 0 || 2*correct == B {
		t.Fatalf("%d of %d correct: the accuracy check would not see a flipped comparison", correct, B)
	}
	init, err := open(t, "../../testdata/mma-l0/adapters_init.safetensors").Float32All()
	if err != nil {
		t.Fatal(err)
	}
	opts := train.Options{Epochs: 1, Batch: B, LR: 0.001, Momentum: 0.9, WD: 5e-4, InOrder: true}
	_, plan := fixtureEnv(t, "mma-l0", 0, []parity.TensorClient{{Pixels: px, Labels: ys}}, opts, init)
	shared := tensor.Named{}
	for name, p := range init {
		if IsShared(name) {
			shared[name] = p
		}
	}
	res, err := plan.Clients[0].Fit(context.Background(), federation.FitIns{Round: 0, Params: shared})
	if err != nil {
		t.Fatal(err)
	}
	wantLoss := float64(get(t, step, "loss")[0])
	if got := res.Metrics["loss"]; math.Abs(got-wantLoss) > 1e-4*(1+wantLoss) {
		t.Errorf("loss %v, reference %v", got, wantLoss)
	}
	if got, want := res.Metrics["train_acc"], 100*float64(correct)/float64(B); got != want {
		t.Errorf("train_acc %v, want %v (%d of %d)", got, want, correct, B)
	}
	if res.NumExamples != B {
		t.Errorf("n_i %d, want %d", res.NumExamples, B)
	}
}

// batchRecorder is a train.Trainable that records the batches it is given.
type batchRecorder struct{ items []int }

func (r *batchRecorder) Params() []optim.Param { return nil }

func (r *batchRecorder) Step(_ context.Context, b train.Batch) (float64, int, error) {
	r.items = append(r.items, b.Items...)
	return 0, 0, nil
}

// TestClientBatchOrderStream: a pFedMMA client shuffles its examples with
// PCG(seed, ID+1), the generator every other method's client uses
// (methods/client, clientbase), so that all methods see the same batches.
func TestClientBatchOrderStream(t *testing.T) {
	step := open(t, "../../testdata/mma-l2/step.safetensors")
	images, labels := get(t, step, "images"), getInts(t, step, "labels")
	clients := []parity.TensorClient{{Pixels: images, Labels: labels}, {Pixels: images, Labels: labels}}
	opts := train.Options{Epochs: 1, Batch: 2, LR: 0.001}
	env, plan := fixtureEnv(t, "mma-l2", 2, clients, opts, nil)
	for i, pc := range plan.Clients {
		c := pc.(*client.Client)
		rec := &batchRecorder{}
		if _, err := c.Loop().Run(context.Background(), 0, rec); err != nil {
			t.Fatal(err)
		}
		want := rand.New(rand.NewPCG(env.Seed, uint64(c.ID())+1)).Perm(len(labels))
		if !slices.Equal(rec.items, want) {
			t.Errorf("client %d: order %v, want PCG(seed, %d)'s %v", i, rec.items, c.ID()+1, want)
		}
	}
}

// TestEvalGroupFromBlockOne: the clients of a run share one group
// evaluation exactly when the adapters start at a block ℓ ≥ 1 (block ℓ is
// then a branch beside the frozen block ℓ); with ℓ = 0 each evaluates alone.
func TestEvalGroupFromBlockOne(t *testing.T) {
	step := open(t, "../../testdata/mma-l2/step.safetensors")
	images, labels := get(t, step, "images"), getInts(t, step, "labels")
	clients := []parity.TensorClient{{Pixels: images, Labels: labels}, {Pixels: images, Labels: labels}}
	for _, start := range []int{0, 1, 4} {
		_, plan := fixtureEnv(t, "mma-l2", start, clients, train.Options{Epochs: 1, Batch: 2, LR: 0.001}, nil)
		g0 := plan.Clients[0].(*client.Client).EvalGroup()
		g1 := plan.Clients[1].(*client.Client).EvalGroup()
		if start == 0 {
			if g0 != nil || g1 != nil {
				t.Errorf("start 0: clients have a group evaluation")
			}
			continue
		}
		if g0 == nil || g0 != g1 || g0.(*evalGroup).start != start {
			t.Errorf("start %d: groups %v, %v, want one shared group at block %d", start, g0, g1, start)
		}
	}
}

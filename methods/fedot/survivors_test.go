package fedot

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestMatrixClearsBuffer: Matrix writes the whole [d, d] W, zeros outside
// the diagonal blocks included, into a buffer that held other values.
func TestMatrixClearsBuffer(t *testing.T) {
	const r, s = 2, 3
	d := r * s
	c, err := NewCayley(d, r)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, r*s*s)
	IdentityX(x, r, s)
	if err := c.Factor(x); err != nil {
		t.Fatal(err)
	}
	w := make([]float32, d*d)
	for i := range w {
		w[i] = 7
	}
	if err := c.Matrix(w); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			want := float32(0)
			if i == j {
				want = 1 // X = I: R = 0, W = I
			}
			if math.Abs(float64(w[i*d+j]-want)) > 1e-6 {
				t.Fatalf("W[%d][%d] = %g, want %g", i, j, w[i*d+j], want)
			}
		}
	}
}

// TestFactorGoPivots: the pure-Go LU pivots as LAPACK's dgetf2 (idamax:
// the first entry of largest magnitude), by hand on 2×2 matrices
// (column-major): a tie keeps the diagonal row, and a larger negative
// entry below a zero is chosen (no false "singular").
func TestFactorGoPivots(t *testing.T) {
	tie := []float64{1, 1, 2, 3} // [[1 2] [1 3]]
	piv := make([]int32, 2)
	if err := factorGo(tie, piv, 2); err != nil || piv[0] != 1 || piv[1] != 2 {
		t.Errorf("tie: piv %v (%v), want [1 2]", piv, err)
	}
	// U: after no interchange, l = 1, u22 = 3 − 1·2 = 1
	if tie[1] != 1 || tie[3] != 1 {
		t.Errorf("tie: factors %v, want l21 1 and u22 1", tie)
	}
	neg := []float64{0, -1, 1, 0} // [[0 1] [−1 0]]
	if err := factorGo(neg, piv, 2); err != nil || piv[0] != 2 {
		t.Errorf("|−1| > 0: piv %v (%v), want row 2 first", piv, err)
	}
}

// TestLogitsRefusesClass: a class index outside the classifier's K rows
// is an error naming it (K itself included).
func TestLogitsRefusesClass(t *testing.T) {
	s := &Settings{Variant: VariantFedLT, Blocks: 1}
	m, err := NewModel(s, 2, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := tensor.Named{ParamClassifier: tensor.New(3, 2), ParamLinear: tensor.New(2, 2)}
	h := []float32{1, 0}
	if _, err := m.Logits(p, h, 1, []int{0, 2}); err != nil {
		t.Errorf("classes 0 and 2 of 3: %v", err)
	}
	for _, c := range []int{3, -1} {
		if _, err := m.Logits(p, h, 1, []int{0, c}); err == nil || !strings.Contains(err.Error(), "outside the classifier's 3 rows") {
			t.Errorf("class %d: %v", c, err)
		}
	}
}

// TestModelStepCountsCorrect: Step's count of correct predictions, by
// hand: w_1 = I (X = I), w_g the first three unit vectors, so each row
// predicts the largest of its first three features.
func TestModelStepCountsCorrect(t *testing.T) {
	const d, K = 4, 3
	s := &Settings{Variant: VariantFedOT, Blocks: 1}
	m, err := NewModel(s, d, K, 10)
	if err != nil {
		t.Fatal(err)
	}
	p := tensor.Named{ParamClassifier: tensor.New(K, d), ParamX: tensor.New(1, d, d)}
	for c := 0; c < K; c++ {
		p[ParamClassifier].Data[c*d+c] = 1
	}
	IdentityX(p[ParamX].Data, 1, d)
	h := []float32{
		1, 0, 0, 0, // predicts 0
		0, 2, 0, 0, // 1
		0, 0, 3, 0, // 2
		0, 1, 0, 5, // 1
	}
	labels := []int{0, 2, 2, 1} // rows 0, 2 and 3 right
	_, correct, err := m.Step(p, h, labels, []int{0, 1, 2})
	if err != nil || correct != 3 {
		t.Errorf("correct %d (%v), want 3", correct, err)
	}
}

// TestEvaluateReportsMetrics: a client's Evaluate reports its accuracies.
func TestEvaluateReportsMetrics(t *testing.T) {
	s := &Settings{Variant: VariantFedOT, Blocks: 1, Init: "text"}
	env := featureEnv(t, 16, 4, 2, 20, testOpts())
	initFor(env, s)
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.Clients[0].Evaluate(context.Background(), federation.EvaluateIns{})
	if err != nil || len(res.Metrics) == 0 {
		t.Fatalf("metrics %v (%v)", res.Metrics, err)
	}
	for k, v := range res.Metrics {
		if !(v >= 0 && v <= 100) {
			t.Errorf("%s = %g", k, v)
		}
	}
}

// TestInitClassifierFromText: without given parameters, init text starts
// w_g at the class prompts' L2-normalised text features (the frozen CLIP
// text encoder, run here directly) and a class in no label space at a zero
// row (not NaN); init random at U(−1/√d, 1/√d) rows.
func TestInitClassifierFromText(t *testing.T) {
	m := tinyModel()
	const K = 3
	tok64 := paritytest.TinyTokens(K)
	tokens := make([]int, len(tok64))
	for i, v := range tok64 {
		tokens[i] = int(v)
	}
	S := m.W.Config.Vision.ImageSize
	rng := rand.New(rand.NewPCG(5, 5))
	clients := []parity.TensorClient{{Pixels: paritytest.RandTensor(rng, 1, 2, 3, S, S).Data, Labels: []int{0, 2}}}
	d := m.W.Config.EmbedDim
	want, err := m.EncodeText(tokens, K)
	if err != nil {
		t.Fatal(err)
	}
	clip.NormalizeRows(nil, want, K, d)
	for _, init := range []string{"text", "random", "text, class 2 in no space"} {
		env, err := parity.TensorEnv(m, methods.Features, tokens, K, clients, train.Options{Epochs: 1, Batch: 2, LR: 0.01}, 3)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(init, "no space") {
			// the dataset keeps 3 classes, the only label space has 0 and 1
			env.Task.Spaces[0].Classes = []int{0, 1}
			env.SpaceTokenRows[0] = tokens[:2*len(tokens)/K]
			init = "text, no space"
		}
		plan, err := Method{}.Build(env, &Settings{Variant: VariantFedOT, Blocks: 1, Init: strings.TrimSuffix(init, ", no space")})
		env.TrainStore.Close()
		if err != nil {
			t.Fatal(err)
		}
		site, err := plan.Site(0)
		if err != nil {
			t.Fatal(err)
		}
		wg := site[ParamClassifier].Data
		var md, mx float64
		for i := range want {
			md = math.Max(md, math.Abs(float64(wg[i]-want[i])))
			mx = math.Max(mx, math.Abs(float64(wg[i])))
		}
		switch init {
		case "text":
			if md > 1e-5 {
				t.Errorf("init text: w_g differs from the normalised text features by %g", md)
			}
		case "text, no space":
			// rows 0 and 1 from the text; row 2, in no space, zero (not NaN)
			for i, v := range wg {
				if i < 2*d && math.Abs(float64(v-want[i])) > 1e-5 || i >= 2*d && v != 0 {
					t.Fatalf("class in no space: w_g[%d][%d] = %g", i/d, i%d, v)
				}
			}
		case "random":
			if md < 1e-2 || mx >= 1/math.Sqrt(float64(d)) {
				t.Errorf("init random: max |w_g| %g (bound %g), distance from the text rows %g", mx, 1/math.Sqrt(float64(d)), md)
			}
		}
	}
}

// TestFixtureParamsOneClass: a fixture's w_g may have a single row.
func TestFixtureParamsOneClass(t *testing.T) {
	s := &Settings{Variant: VariantFedLT, Blocks: 1}
	f := &parity.Fixture{Params: tensor.Named{ParamClassifier: tensor.New(1, 4), ParamLinear: tensor.New(4, 4)}}
	if _, K, err := fixtureParams(s, f, 4); err != nil || K != 1 {
		t.Errorf("K = 1: %d, %v", K, err)
	}
	f.Params[ParamClassifier] = tensor.New(0, 4)
	if _, _, err := fixtureParams(s, f, 4); err == nil || !strings.Contains(err.Error(), ParamClassifier) {
		t.Errorf("K = 0: %v", err)
	}
}

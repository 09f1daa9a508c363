package fedmvp

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// tensorPlan builds FedMVP on the random 2-block CLIP over clients of 6, 4
// and 2 images of C = 3 classes (two description rows each), the server
// initialised.
func tensorPlan(t *testing.T, s *Settings) *methods.Plan {
	t.Helper()
	plan, _ := tensorPlanEnv(t, s, nil)
	return plan
}

// tensorPlanEnv is tensorPlan with its Env, edited by edit (when set)
// before the plan is built.
func tensorPlanEnv(t *testing.T, s *Settings, edit func(*methods.Env)) (*methods.Plan, *methods.Env) {
	t.Helper()
	const C = 3
	m := randomModel()
	ctx := m.W.Config.Text.ContextLength
	rng := rand.New(rand.NewPCG(8, 1))
	s.descTokens, s.descClass = nil, nil
	for c := 0; c < C; c++ {
		for d := 0; d < 2; d++ {
			row := make([]int, ctx)
			row[0], row[1], row[2], row[3] = 18, 2+c, 8+d, 19
			s.descTokens = append(s.descTokens, row...)
			s.descClass = append(s.descClass, c)
		}
	}
	tokens := make([]int, C*ctx) // class prompts: only their number is used
	var clients []parity.TensorClient
	S := m.W.Config.Vision.ImageSize
	for _, n := range []int{6, 4, 2} {
		tc := parity.TensorClient{Pixels: gradcheck.Rand(rng, n*3*S*S, 1)}
		for k := 0; k < n; k++ {
			tc.Labels = append(tc.Labels, rng.IntN(C))
		}
		clients = append(clients, tc)
	}
	opts := train.Options{Epochs: 1, Batch: 4, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 1e-5}
	env, err := parity.TensorEnv(m, methods.Embeddings, tokens, C, clients, opts, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	if edit != nil {
		edit(env)
	}
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	var infos []federation.ClientInfo
	for _, cl := range plan.Clients {
		infos = append(infos, federation.ClientInfo{ID: cl.ID(), NumExamples: cl.NumExamples()})
	}
	if err := plan.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
	return plan, env
}

func testSettings() *Settings {
	s := Method{}.DefaultConfig().(*Settings)
	s.Heads, s.LoRARank, s.Prompts = 2, 2, 3
	return s
}

// round runs one round of every client and returns what each received and
// uploaded.
func round(t *testing.T, plan *methods.Plan, r int) ([]tensor.Named, []tensor.Named) {
	t.Helper()
	ids := []int{0, 1, 2}
	ins, err := plan.Strategy.Configure(r, ids)
	if err != nil {
		t.Fatal(err)
	}
	var res []federation.FitResult
	var sent, ups []tensor.Named
	for _, id := range ids {
		fr, err := plan.Clients[id].Fit(context.Background(), federation.FitIns{Round: r, Params: ins[id]})
		if err != nil {
			t.Fatal(err)
		}
		sent, ups = append(sent, ins[id]), append(ups, fr.Params)
		res = append(res, federation.FitResult{ClientID: id, NumExamples: fr.NumExamples, Params: fr.Params})
	}
	if err := plan.Strategy.Aggregate(r, res, nil); err != nil {
		t.Fatal(err)
	}
	return sent, ups
}

func changed(a, b *tensor.Tensor) bool { return !slices.Equal(a.Data, b.Data) }

// TestLoRASwitch: with a threshold above every loss each client switches
// in its first round (its last batch's step then leaves the
// cross-attention alone): from then on it leaves the cross-attention block
// as received and trains the LoRA factors (and the linear map); before the
// switch the LoRA factors stay as received. With threshold 0 no client ever
// switches. The switch is the site's own: kept for predict, not uploaded.
func TestLoRASwitch(t *testing.T) {
	s := testSettings()
	s.LoRAThreshold = 1e9
	plan := tensorPlan(t, s)
	for r := 0; r < 2; r++ {
		sent, ups := round(t, plan, r)
		for i := range ups {
			if _, ok := ups[i][StateLoRA]; ok {
				t.Fatalf("round %d client %d uploaded its LoRA switch", r, i)
			}
			for name, u := range ups[i] {
				before := sent[i][name]
				if before == nil {
					t.Fatalf("round %d client %d: %s not sent", r, i, name)
				}
				lora := r > 0
				if r == 0 && Trained(name, false) && !Trained(name, true) {
					// the switching round: the last batch's step leaves
					// the cross-attention alone, earlier batches' move it
					// (TestSwitchingRoundFreezesCrossAttention)
					continue
				}
				if want := Trained(name, lora); changed(u, before) != want {
					t.Errorf("round %d client %d: %s changed=%v, want %v (LoRA mode %v)", r, i, name, !want, want, lora)
				}
			}
			kept, err := plan.Site(i)
			if err != nil {
				t.Fatal(err)
			}
			if kept[StateLoRA] == nil || kept[StateLoRA].Data[0] != 1 {
				t.Errorf("round %d client %d: the site does not keep its switch to LoRA", r, i)
			}
		}
	}
	s = testSettings()
	s.LoRAThreshold = 0
	plan = tensorPlan(t, s)
	for r := 0; r < 2; r++ {
		sent, ups := round(t, plan, r)
		for name, u := range ups[0] {
			if changed(u, sent[0][name]) != Trained(name, false) {
				t.Errorf("threshold 0, round %d: %s changed=%v", r, name, changed(u, sent[0][name]))
			}
		}
	}
}

// TestUniformMean: the server's tensors after a round are the plain mean
// of the uploads (the authors' server divides the sum by the number of
// clients), not weighted by the clients' 6, 4 and 2 images.
func TestUniformMean(t *testing.T) {
	plan := tensorPlan(t, testSettings())
	_, ups := round(t, plan, 0)
	g := plan.Global()
	for name, t0 := range g {
		for i := range t0.Data {
			want := (ups[0][name].Data[i] + ups[1][name].Data[i] + ups[2][name].Data[i]) / 3
			if d := t0.Data[i] - want; d > 1e-6 || d < -1e-6 {
				t.Fatalf("%s[%d] = %g, want the uniform mean %g", name, i, t0.Data[i], want)
			}
		}
	}
	if !changed(g[ParamLinW], ups[0][ParamLinW]) {
		t.Error("global linear map equals client 0's upload")
	}
}

// TestDescriptions: a world class gets four descriptions naming its colour,
// shape and pattern in the authors' sentence form under the run's
// template; any other class four generic ones; every class the same count.
func TestDescriptions(t *testing.T) {
	d := Descriptions("red striped triangle", "a photo of a {}.")
	if len(d) != 4 {
		t.Fatalf("%d descriptions, want 4", len(d))
	}
	all := strings.Join(d, " | ")
	for _, w := range []string{"a photo of a red striped triangle, which has red as its main colour", "outline of a triangle", "stripes", "which is a single flat object"} {
		if !strings.Contains(all, w) {
			t.Errorf("descriptions %q lack %q", all, w)
		}
	}
	solid := strings.Join(Descriptions("solid blue circle", "a sketch of a {}."), " | ")
	for _, w := range []string{"a sketch of a solid blue circle, which has blue as its main colour", "outline of a circle", "without any markings"} {
		if !strings.Contains(solid, w) {
			t.Errorf("descriptions %q lack %q", solid, w)
		}
	}
	other := Descriptions("golden_retriever", "a photo of a {}.")
	if len(other) != 4 || !strings.HasPrefix(other[0], "a photo of a golden retriever, which has its typical") {
		t.Errorf("generic descriptions %q", other)
	}
	if a, b := Descriptions("blue dotted heart", "a photo of a {}."), Descriptions("blue dotted heart", "a photo of a {}."); !slices.Equal(a, b) {
		t.Error("descriptions are not deterministic")
	}
}

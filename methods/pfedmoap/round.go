package pfedmoap

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// FixtureRound implements fixture.Rounder through the production path: the
// method's Plan (its KNNPool strategy and promptfed client, as `pfedmma
// run` builds them) on the fixture of testdata/pfedmoap/round.safetensors.
// The strategy is loaded with the fixture's pool and global prompt, its
// Configure picks client K's experts (num_experts − 1 of them, by the
// configured selection), and client K — a federation Site starting from
// the global prompt and init's gate — trains on what it received. The
// result holds "selected" (the experts' client ids, in the order sent),
// "distances_to_K" (to every other client, in id order, as the paper's
// rule ranks them), "clientK.loss" (the mean batch loss) and
// "clientK.trained.<p>".
func (Method) FixtureRound(ctx context.Context, f *fixture.Fixture) (tensor.Named, error) {
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	s := sec.(*Settings)
	switch sel := f.Meta["selection"]; sel {
	case "", "nearest":
		s.Selection = "nearest"
	case "random":
		s.Selection = "random"
	default:
		return nil, fmt.Errorf("pfedmoap: selection %q: want \"nearest\" or \"random\"", sel)
	}
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, err
	}
	self, err := prompt.MetaInt(f.Meta, "client")
	if err != nil {
		return nil, fmt.Errorf("pfedmoap: %w", err)
	}
	seed := 0
	if _, ok := f.Meta["seed"]; ok {
		if seed, err = prompt.MetaInt(f.Meta, "seed"); err != nil {
			return nil, fmt.Errorf("pfedmoap: %w", err)
		}
	}
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		return nil, err
	}
	g, err := f.Tensor("global_prompt")
	if err != nil {
		return nil, err
	}
	poolT, err := f.Tensor("pool")
	if err != nil {
		return nil, err
	}
	if len(poolT.Shape) != 3 || self < 0 || self >= poolT.Shape[0] {
		return nil, fmt.Errorf("pfedmoap: pool %v [N, n_ctx, D] has no client %d", poolT.Shape, self)
	}
	N, per := poolT.Shape[0], poolT.Shape[1]*poolT.Shape[2]
	pre := fmt.Sprintf("client%d.", self)
	px, err := f.Tensor(pre + "images")
	if err != nil {
		return nil, err
	}
	labels, err := f.IntsOf(pre + "labels")
	if err != nil {
		return nil, err
	}
	// the pool's N clients (client ids are indices); only client self
	// trains, the others hold its images as placeholders
	clients := make([]fixture.TensorClient, N)
	for j := range clients {
		clients[j] = fixture.TensorClient{Pixels: px.Data, Labels: labels}
	}
	env, err := fixture.TensorEnv(f.Model, methods.Features, tokens, len(tokens)/f.Model.W.Config.Text.ContextLength, clients, opts, uint64(seed))
	if err != nil {
		return nil, err
	}
	defer env.TrainStore.Close()
	env.Init = f.Params.Clone()
	env.Init[ParamCtx] = g.Clone() // the client starts from the global prompt
	plan, err := Method{}.Build(env, s)
	if err != nil {
		return nil, err
	}
	infos := make([]federation.ClientInfo, N)
	st := tensor.Named{"global/" + ParamCtx: g.Clone()}
	pool := make([][]float32, N)
	for j := range N {
		infos[j] = federation.ClientInfo{ID: j, NumExamples: 1}
		pool[j] = poolT.Data[j*per : (j+1)*per]
		st["pool/"+strconv.Itoa(j)+"/"+ParamCtx] = &tensor.Tensor{Shape: poolT.Shape[1:], Data: append([]float32(nil), pool[j]...)}
	}
	if err := plan.Strategy.Init(infos); err != nil {
		return nil, err
	}
	if err := plan.Strategy.LoadState(st); err != nil {
		return nil, err
	}
	ins, err := plan.Strategy.Configure(1, []int{self})
	if err != nil {
		return nil, err
	}
	site := federation.NewSite(plan.Clients[self], "")
	res, err := site.Fit(ctx, federation.FitIns{Round: 1, Params: ins[self]})
	if err != nil {
		return nil, err
	}
	out := tensor.Named{pre + "loss": prompt.Scalar(res.Metrics["loss"])}
	_, experts, err := strategy.SplitExperts(ins[self])
	if err != nil {
		return nil, err
	}
	var sel []float32
	for _, e := range experts {
		id := -1
		for j, p := range pool {
			if t := e[ParamCtx]; t != nil && slices.Equal(t.Data, p) {
				id = j
				break
			}
		}
		sel = append(sel, float32(id))
	}
	out["selected"] = &tensor.Tensor{Shape: []int{len(sel)}, Data: sel}
	if s.Selection == "nearest" {
		_, dist, err := Nearest(pool, self, len(experts))
		if err != nil {
			return nil, err
		}
		var others []float32
		for j, d := range dist {
			if j != self {
				others = append(others, float32(d))
			}
		}
		out["distances_to_"+strconv.Itoa(self)] = &tensor.Tensor{Shape: []int{len(others)}, Data: others}
	}
	kept, err := plan.Site(self)
	if err != nil {
		return nil, err
	}
	for name := range env.Init {
		if name != ParamCtx && !IsGate(name) {
			continue // the step fixture's experts
		}
		p, ok := kept[name]
		if !ok {
			return nil, fmt.Errorf("pfedmoap: client %d keeps no %q", self, name)
		}
		out[pre+"trained."+name] = p
	}
	return out, nil
}

package pfedmoap

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx, gating_embed_dim, gating_heads, scaling,
// lambda, num_experts, lr, momentum, weight_decay, gating_lr,
// gating_momentum and gating_weight_decay (init_std and
// class_token_position when present) from
// fixture metadata. Fixture learning rates are constant (CosinePrompt off).
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := DefaultConfig()
	c.CosinePrompt = false
	var err error
	for key, dst := range map[string]*int{"n_ctx": &c.NCtx, "gating_embed_dim": &c.GateWidth, "gating_heads": &c.GateHeads, "num_experts": &c.NumExperts} {
		if *dst, err = prompt.MetaInt(meta, key); err != nil {
			return c, fmt.Errorf("pfedmoap: %w", err)
		}
	}
	for key, dst := range map[string]*float64{
		"scaling": &c.Scaling, "lambda": &c.Lambda, "lr": &c.LR, "momentum": &c.Momentum, "weight_decay": &c.WeightDecay,
		"gating_lr": &c.GateLR, "gating_momentum": &c.GateMomentum, "gating_weight_decay": &c.GateWeightDecay,
	} {
		if *dst, err = prompt.MetaFloat(meta, key); err != nil {
			return c, fmt.Errorf("pfedmoap: %w", err)
		}
	}
	if _, ok := meta["init_std"]; ok {
		if c.InitStd, err = prompt.MetaFloat(meta, "init_std"); err != nil {
			return c, fmt.Errorf("pfedmoap: %w", err)
		}
	}
	if c.Position, err = prompt.MetaPosition(meta); err != nil {
		return c, fmt.Errorf("pfedmoap: %w", err)
	}
	return c, c.Validate()
}

// Optimizers are the two SGDs of one client: the prompt's and the gate's.
type Optimizers struct {
	Prompt, Gate *optim.SGD
}

// NewOptimizers returns fresh optimizers with cfg's momentum and weight decay.
func NewOptimizers(cfg Config) Optimizers {
	return Optimizers{
		Prompt: optim.NewSGD(cfg.Momentum, cfg.WeightDecay, false),
		Gate:   optim.NewSGD(cfg.GateMomentum, cfg.GateWeightDecay, false),
	}
}

// Step applies one step to the learner's parameters from its gradients:
// the prompt with promptLR, the gate with gateLR (the gate is left alone
// while the learner has no experts: it takes no part in the loss).
func (o Optimizers) Step(l *Learner, promptLR, gateLR float64) error {
	p, g := l.Params(), l.Grads()
	if err := o.Prompt.Step(promptLR, []optim.Param{{Name: ParamCtx, Value: p[ParamCtx].Data, Grad: g[ParamCtx].Data}}); err != nil {
		return fmt.Errorf("pfedmoap: %w", err)
	}
	if l.nExperts == 0 {
		return nil
	}
	var gp []optim.Param
	for _, name := range gateNames {
		gp = append(gp, optim.Param{Name: name, Value: p[name].Data, Grad: g[name].Data})
	}
	if err := o.Gate.Step(gateLR, gp); err != nil {
		return fmt.Errorf("pfedmoap: %w", err)
	}
	return nil
}

// replay rebuilds the learner of a fixture file.
var replay = prompt.Replay[*Learner, Config]{Name: "pfedmoap", Config: ConfigFromMeta, New: New,
	Scale: func(l *Learner, s float32) { l.LogitScale = s }}

func imageFeatures(m *clip.Model, batch tensor.Named, prefix string) ([]float32, []int, error) {
	labels, err := prompt.Ints(batch, prefix+"labels")
	if err != nil {
		return nil, nil, fmt.Errorf("pfedmoap: %w", err)
	}
	img, B, err := prompt.ImageFeatures(m, batch, prefix)
	if err != nil {
		return nil, nil, fmt.Errorf("pfedmoap: %w", err)
	}
	if len(labels) != B {
		return nil, nil, fmt.Errorf("pfedmoap: %slabels: %d labels for %d images", prefix, len(labels), B)
	}
	return img, labels, nil
}

// StepFromFile replays one training step in the fixture layout of
// testdata/pfedmoap/step.safetensors. params holds "prompt_learner.ctx",
// the gate's "gating.*" tensors and the downloaded experts "expert0.ctx",
// "expert1.ctx", … (in the order given to the gate); batch holds "tokens",
// "labels" and "images" [B, 3, S, S] or "image_features" [B, E]; meta gives
// the settings (ConfigFromMeta) and logit_scale. The result holds
// "image_features", "text_features", "nonlocal_text_features" [K, C, d_g],
// "gate_output" [C, B, d_g], "gate_attention" [C, B, K+1], "logits",
// "loss", "grad.<p>" and "step1.<p>" for the prompt and every gate tensor
// (after one step of the two fresh SGDs).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, _, err := replay.Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	var experts [][]float32
	for j := 0; ; j++ {
		t, ok := params["expert"+strconv.Itoa(j)+".ctx"]
		if !ok {
			break
		}
		experts = append(experts, t.Data)
	}
	if err := l.SetExperts(experts); err != nil {
		return nil, err
	}
	img, labels, err := imageFeatures(m, batch, "")
	if err != nil {
		return nil, err
	}
	loss, logits, err := l.Step(img, labels)
	if err != nil {
		return nil, err
	}
	B, C, K, dg := len(labels), l.C, len(experts), l.Cfg.GateWidth
	out := tensor.Named{
		"image_features": {Shape: []int{B, l.E}, Data: slices.Clone(img)},
		"text_features":  {Shape: []int{C, l.E}, Data: slices.Clone(l.txt)},
		"logits":         {Shape: []int{B, C}, Data: slices.Clone(logits)},
		"loss":           prompt.Scalar(loss),
	}
	if K > 0 {
		o, a := l.GateOutput()
		out["nonlocal_text_features"] = &tensor.Tensor{Shape: []int{K, C, dg}, Data: slices.Clone(l.experts)}
		out["gate_output"] = &tensor.Tensor{Shape: []int{C, B, dg}, Data: slices.Clone(o)}
		out["gate_attention"] = &tensor.Tensor{Shape: []int{C, B, K + 1}, Data: slices.Clone(a)}
	}
	for name, g := range l.Grads() {
		out["grad."+name] = g.Clone()
	}
	if err := NewOptimizers(l.Cfg).Step(l, l.Cfg.LR, l.Cfg.GateLR); err != nil {
		return nil, err
	}
	for name, p := range l.Params() {
		out["step1."+name] = p.Clone()
	}
	return out, nil
}

// RoundFromFile replays the server side of a round and one returning
// client's local training in the fixture layout of
// testdata/pfedmoap/round.safetensors. batch holds "pool" [N, n_ctx, D]
// (every client's last upload, at the start of the round), "global_prompt"
// [n_ctx, D], "tokens" and the client's "clientK.images" (or
// "clientK.image_features") and "clientK.labels"; params holds the client's
// gate ("gating.*"); meta gives client (K), selection ("nearest", the
// paper's rule, or "random": the authors' default, a permutation from
// seed), num_experts, batch_size, local_epochs and the settings. The client
// takes num_experts − 1 experts from the pool, starts its prompt from the
// global prompt and trains local_epochs epochs (two fresh SGDs). The result
// holds "distances_to_K" (to every other client, in id order), "selected"
// (expert ids, nearest first), "clientK.batch_losses" and
// "clientK.trained.<p>".
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	g, ok := batch["global_prompt"]
	if !ok {
		return nil, fmt.Errorf("pfedmoap: tensor %q is missing", "global_prompt")
	}
	start := tensor.Named{ParamCtx: g} // the client starts from the global prompt
	for name, v := range params {
		if IsGate(name) {
			start[name] = v
		}
	}
	l, _, err := replay.Learner(m, start, tensor.Named{"tokens": batch["tokens"]}, meta, false)
	if err != nil {
		return nil, err
	}
	self, err := prompt.MetaInt(meta, "client")
	if err != nil {
		return nil, fmt.Errorf("pfedmoap: %w", err)
	}
	bs, err := prompt.MetaInt(meta, "batch_size")
	if err != nil {
		return nil, fmt.Errorf("pfedmoap: %w", err)
	}
	epochs, err := prompt.MetaInt(meta, "local_epochs")
	if err != nil {
		return nil, fmt.Errorf("pfedmoap: %w", err)
	}
	if bs < 1 || epochs < 1 {
		return nil, fmt.Errorf("pfedmoap: batch_size %d and local_epochs %d must be positive", bs, epochs)
	}
	poolT, ok := batch["pool"]
	if !ok || len(poolT.Shape) != 3 {
		return nil, fmt.Errorf("pfedmoap: tensor %q [N, n_ctx, D] is missing", "pool")
	}
	N, per := poolT.Shape[0], poolT.Shape[1]*poolT.Shape[2]
	pool := make([][]float32, N)
	for j := range pool {
		pool[j] = poolT.Data[j*per : (j+1)*per]
	}
	k := l.Cfg.Experts(N)
	out := tensor.Named{}
	var ids []int
	switch rule := meta["selection"]; rule {
	case "nearest", "":
		var dist []float64
		if ids, dist, err = Nearest(pool, self, k); err != nil {
			return nil, err
		}
		var others []float32
		for j, d := range dist {
			if j != self {
				others = append(others, float32(d))
			}
		}
		out["distances_to_"+strconv.Itoa(self)] = &tensor.Tensor{Shape: []int{len(others)}, Data: others}
	case "random":
		seed, err := prompt.MetaInt(meta, "seed")
		if err != nil {
			return nil, fmt.Errorf("pfedmoap: %w", err)
		}
		ids = Random(pool, self, k, Permutation(N, uint64(seed)))
	default:
		return nil, fmt.Errorf("pfedmoap: selection %q: want \"nearest\" or \"random\"", rule)
	}
	sel := make([]float32, len(ids))
	experts := make([][]float32, len(ids))
	for i, j := range ids {
		sel[i], experts[i] = float32(j), pool[j]
	}
	out["selected"] = &tensor.Tensor{Shape: []int{len(ids)}, Data: sel}
	if err := l.SetExperts(experts); err != nil {
		return nil, err
	}
	pre := fmt.Sprintf("client%d.", self)
	img, labels, err := imageFeatures(m, batch, pre)
	if err != nil {
		return nil, err
	}
	opt := NewOptimizers(l.Cfg)
	var losses []float32
	B := len(labels)
	for ep := 0; ep < epochs; ep++ {
		for lo := 0; lo < B; lo += bs {
			hi := min(lo+bs, B)
			loss, _, err := l.Step(img[lo*l.E:hi*l.E], labels[lo:hi])
			if err != nil {
				return nil, fmt.Errorf("pfedmoap: client %d batch %d: %w", self, lo/bs, err)
			}
			losses = append(losses, float32(loss))
			if err := opt.Step(l, l.Cfg.LR, l.Cfg.GateLR); err != nil {
				return nil, err
			}
		}
	}
	out[pre+"batch_losses"] = &tensor.Tensor{Shape: []int{len(losses)}, Data: losses}
	for name, p := range l.Params() {
		out[pre+"trained."+name] = p.Clone()
	}
	return out, nil
}

// SettingsFrom implements parity.Settings.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	cfg, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	return fromConfig(cfg), nil
}

// Step implements parity.Stepper.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// FixtureRound implements parity.Rounder through the production path: the
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
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
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
	clients := make([]parity.TensorClient, N)
	for j := range clients {
		clients[j] = parity.TensorClient{Pixels: px.Data, Labels: labels}
	}
	env, err := parity.TensorEnv(f.Model, methods.Features, tokens, len(tokens)/f.Model.W.Config.Text.ContextLength, clients, opts, uint64(seed))
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

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "class_token_position", "client", "gating_embed_dim", "gating_heads", "gating_lr",
		"gating_momentum", "gating_weight_decay", "init_std", "lambda", "local_epochs", "logit_scale",
		"lr", "momentum", "n_ctx", "num_experts", "scaling", "seed", "selection", "weight_decay",
	}
}

var _ parity.Method = Method{}

package adapt

// The reference-fixture contract (`pfedmma step` / `pfedmma round`, README
// "The reference-fixture contract") for ADAPT. ADAPT has no public code:
// testdata/adapt holds fixtures of an independent float64 PyTorch ADAPT
// (tools/fixtures/adapt), which external_test.go checks against the
// production Client.Step and Client.Fit and Coordinator rounds; this
// file's step and round are the `pfedmma step` / `round` replay.
//
// Inputs, besides images [B,3,S,S], labels [B] and tokens [C,ctx] (class
// prompts with n_ctx placeholder tokens, as the other prompt methods):
//
//   - parameters under the package's names: text_prompt.<i> [n_ctx, Dt]
//     for i = 0..n−1 (n domains), visual_prompt [n, Dv], and with AdaLN
//     adaln.<l>.weight [2E, E], adaln.<l>.bias [2E] for l = 0..L−1;
//   - step only (a round rejects them), optional EMA targets ema_target.text_prompt.<j> (the last
//     relayed copy of another domain j; in the parameters or the batch
//     file): before the step the client's copy moves toward it,
//     t ← ema·t + (1−ema)·target, as Client.Step does;
//   - the client's own domain: metadata key "domain" (so `--set domain=2`
//     gives it) or an integer tensor "domain" with one value; 0 when
//     neither is given. A round reads "client<i>.domain" the same way,
//     client i's domain defaulting to i (one client per domain, the
//     paper's setting); the clients' domains must be exactly 0..n−1.
//
// Hyper-parameters from the metadata, DefaultSettings for those missing:
// optimizer (adamw), lr, weight_decay (and momentum for sgd), tau, lambda,
// ema, logit_scale (log of the logit multiplier; the model's when absent),
// and for a round batch_size (32) and local_epochs (1) (it draws nothing:
// no seed). n, n_ctx
// and the AdaLN layers come from the parameters' names and shapes; an
// n_ctx or adaln_layers in the metadata must agree with them.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// EMATargetPrefix starts the names of a step's optional EMA targets,
// "ema_target.text_prompt.<j>".
const EMATargetPrefix = "ema_target."

// fixtureShape is what the parameters of a fixture say about the model.
type fixtureShape struct {
	domains, nCtx, adaLNLayers int
}

// shapeOf reads n (from the text prompts), n_ctx and the AdaLN layers from
// the parameters' names and checks that every parameter is one of ADAPT's.
func shapeOf(params tensor.Named) (fixtureShape, error) {
	var sh fixtureShape
	for sh.domains = 0; ; sh.domains++ {
		if _, ok := params[TextName(sh.domains)]; !ok {
			break
		}
	}
	if sh.domains == 0 {
		return sh, fmt.Errorf("adapt fixture: parameters hold no %q", TextName(0))
	}
	t0 := params[TextName(0)]
	if len(t0.Shape) != 2 || t0.Shape[0] < 1 {
		return sh, fmt.Errorf("adapt fixture: parameter %q has shape %v, want [n_ctx, width]", TextName(0), t0.Shape)
	}
	sh.nCtx = t0.Shape[0]
	for sh.adaLNLayers = 0; ; sh.adaLNLayers++ {
		if w, _ := adaLNNames(sh.adaLNLayers); params[w] == nil {
			break
		}
	}
	known := func(name string) bool {
		if name == ParamVisual {
			return true
		}
		if rest, ok := strings.CutPrefix(name, TextPrefix); ok {
			i, err := strconv.Atoi(rest)
			return err == nil && i >= 0 && i < sh.domains && TextName(i) == name
		}
		for l := 0; l < sh.adaLNLayers; l++ {
			if w, b := adaLNNames(l); name == w || name == b {
				return true
			}
		}
		return false
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		if strings.HasPrefix(name, EMATargetPrefix) {
			continue
		}
		if !known(name) {
			return sh, fmt.Errorf("adapt fixture: parameter %q is not one of ADAPT's (%s<i> for %d domains, %s, %s<l>.weight/bias for %d layers)",
				name, TextPrefix, sh.domains, ParamVisual, AdaLNPrefix, sh.adaLNLayers)
		}
	}
	return sh, nil
}

// SettingsFrom implements parity.Settings: n_ctx and AdaLN from the
// parameters, the rest from the metadata (DefaultSettings where missing).
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	s, _, err := settingsFrom(f)
	return s, err
}

func settingsFrom(f *parity.Fixture) (*Settings, fixtureShape, error) {
	sh, err := shapeOf(f.Params)
	if err != nil {
		return nil, sh, err
	}
	s := DefaultSettings()
	s.NCtx, s.AdaLN = sh.nCtx, sh.adaLNLayers > 0
	if s.AdaLN {
		s.AdaLNLayers = sh.adaLNLayers
	}
	for _, h := range []struct {
		key string
		dst *float64
	}{{"lr", &s.LR}, {"weight_decay", &s.WeightDecay}, {"tau", &s.Tau}, {"lambda", &s.Lambda}, {"ema", &s.EMA}} {
		if *h.dst, err = f.FloatOr(h.key, *h.dst); err != nil {
			return nil, sh, err
		}
	}
	for _, h := range []struct {
		key  string
		want int
	}{{"n_ctx", sh.nCtx}, {"adaln_layers", sh.adaLNLayers}} {
		if _, ok := f.Meta[h.key]; !ok {
			continue // an adaln_layers given with parameters without AdaLN must be 0
		}
		v, err := f.Float(h.key)
		if err != nil {
			return nil, sh, err
		}
		if v != float64(h.want) {
			return nil, sh, fmt.Errorf("adapt fixture: hyper-parameter %s=%v, but the parameters give %d", h.key, v, h.want)
		}
	}
	if o, ok := f.Meta["optimizer"]; ok {
		s.Optimizer = strings.TrimSpace(o)
	}
	switch {
	case !slices.Contains([]string{"adamw", "sgd", OptimizerRun}, s.Optimizer):
		return nil, sh, fmt.Errorf("adapt fixture: optimizer %q: want adamw, sgd or %s", s.Optimizer, OptimizerRun)
	case s.Optimizer != OptimizerRun && !(s.LR > 0 && s.WeightDecay >= 0):
		return nil, sh, fmt.Errorf("adapt fixture: lr %v, weight_decay %v: want lr > 0, weight_decay ≥ 0", s.LR, s.WeightDecay)
	case !(s.EMA >= 0 && s.EMA <= 1):
		return nil, sh, fmt.Errorf("adapt fixture: ema %v not in [0, 1]", s.EMA)
	}
	if err := s.config(sh.domains, 0).Validate(); err != nil {
		return nil, sh, err
	}
	return s, sh, nil
}

// fixtureTrain is the run's local-training options of a fixture: batch_size,
// local_epochs, momentum (and, for optimizer "run", lr and weight_decay),
// stored batch order, a fresh optimizer per round.
func fixtureTrain(f *parity.Fixture, s *Settings) (train.Options, error) {
	g := *f
	g.Meta = maps.Clone(f.Meta)
	if _, ok := g.Meta["lr"]; !ok {
		g.Meta["lr"] = strconv.FormatFloat(s.LR, 'g', -1, 64)
	}
	o, err := g.TrainOptions()
	if err != nil {
		return o, err
	}
	return s.trainOptions(o), nil
}

// fixtureModel is f's model with the metadata's logit_scale (log of the
// multiplier) when given: a shallow copy sharing the weights.
func fixtureModel(f *parity.Fixture) (*clip.Model, error) {
	if _, ok := f.Meta["logit_scale"]; !ok {
		return f.Model, nil
	}
	ls, err := f.Float("logit_scale")
	if err != nil {
		return nil, err
	}
	w := *f.Model.W
	w.LogitScale = float32(ls)
	return clip.New(&w), nil
}

// fixtureInt reads an integer given as the metadata key name or as a
// one-value tensor name (integer, or float holding an integer); def when
// neither is present.
func fixtureInt(f *parity.Fixture, name string, def int) (int, error) {
	if _, ok := f.Meta[name]; ok {
		v, err := f.Float(name)
		if err != nil {
			return 0, err
		}
		if v != math.Trunc(v) {
			return 0, fmt.Errorf("hyper-parameter %s=%v: want an integer", name, v)
		}
		return int(v), nil
	}
	if v, ok := f.Ints[name]; ok {
		if len(v) != 1 {
			return 0, fmt.Errorf("tensor %q: %d values, want 1", name, len(v))
		}
		return v[0], nil
	}
	if t, ok := f.Batch[name]; ok {
		if len(t.Data) != 1 || float64(t.Data[0]) != math.Trunc(float64(t.Data[0])) {
			return 0, fmt.Errorf("tensor %q: want one integer value, have %v", name, t.Data)
		}
		return int(t.Data[0]), nil
	}
	return def, nil
}

// fixtureTokens reads the class prompts [C, ctx].
func fixtureTokens(f *parity.Fixture) ([]int, int, error) {
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		return nil, 0, err
	}
	ctx := f.Model.W.Config.Text.ContextLength
	if len(tokens) == 0 || len(tokens)%ctx != 0 {
		return nil, 0, fmt.Errorf("tensor \"tokens\": %d ids is not a whole number of %d-token rows", len(tokens), ctx)
	}
	return tokens, len(tokens) / ctx, nil
}

// Step implements parity.Stepper: one local step of the client of domain
// "domain" — the EMA of its external prompts toward the given targets, the
// loss and gradients, one step of the section's optimizer from a fresh
// state (the production Client and Learner). It writes
//
//	logits [B, C], loss, loss_ce, loss_dom [1]
//	domain_scores [B, n] (a = ⟨q̂, k̂⟩/τ_d), domain_weights [B, n] (softmax)
//	image_features [B, E] (f_V), text_features [n, C, E] (each domain's,
//	  normalised), mixed_text_features [B, C, E] (after AdaLN when on)
//	domain_query [B, Dv], domain_keys [B, n, Dv] (last block's q_cls, k_i)
//	grad.<param>   for each trained parameter (own text prompt, visual
//	               prompts, AdaLN; the other domains' prompts get none)
//	step1.<param>  for every parameter (the external prompts after the EMA)
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	s, sh, err := settingsFrom(f)
	if err != nil {
		return nil, err
	}
	m, err := fixtureModel(f)
	if err != nil {
		return nil, err
	}
	tokens, C, err := fixtureTokens(f)
	if err != nil {
		return nil, err
	}
	own, err := fixtureInt(f, "domain", 0)
	if err != nil {
		return nil, err
	}
	if own < 0 || own >= sh.domains {
		return nil, fmt.Errorf("adapt fixture: domain %d outside 0..%d (the parameters hold %d text prompts)", own, sh.domains-1, sh.domains)
	}
	images, err := f.Tensor("images")
	if err != nil {
		return nil, err
	}
	labels, err := f.IntsOf("labels")
	if err != nil {
		return nil, err
	}
	B := len(labels)
	S := m.W.Config.Vision.ImageSize
	if B == 0 || len(images.Data) != B*3*S*S {
		return nil, fmt.Errorf("tensor \"images\": shape %v for %d labels of %d×%d px", images.Shape, B, S, S)
	}
	for _, y := range labels {
		if y < 0 || y >= C {
			return nil, fmt.Errorf("tensor \"labels\": label %d outside 0..%d", y, C-1)
		}
	}
	l, err := NewLearner(m, tokens, s.config(sh.domains, 0))
	if err != nil {
		return nil, err
	}
	P := tensor.Named{}
	for name, t := range InitParams(s.config(sh.domains, 0), l.Dt, l.Dv, l.E) {
		src, ok := f.Params[name]
		if !ok || !tensor.SameShape(src.Shape, t.Shape) {
			return nil, fmt.Errorf("adapt fixture: parameters lack %q of shape %v", name, t.Shape)
		}
		P[name] = src.Clone()
	}
	recv, err := emaTargets(f, P, own)
	if err != nil {
		return nil, err
	}
	// the production client's parameter list and EMA, without its data
	G := zerosLike(P)
	emaStep(P, recv, s.EMA)
	x0 := clip.ImagePrefix(m, 1, images.Data, B, nil)
	loss, terms, _, err := l.Step(P, G, x0, labels, own)
	if err != nil {
		return nil, err
	}
	n, E, Dv := sh.domains, l.E, l.Dv
	cp := func(x []float32, shape ...int) *tensor.Tensor {
		t := tensor.New(shape...)
		copy(t.Data, x[:len(t.Data)])
		return t
	}
	out := tensor.Named{
		"logits":              cp(l.logits, B, C),
		"loss":                {Shape: []int{1}, Data: []float32{float32(loss)}},
		"domain_scores":       cp(l.a, B, n),
		"domain_weights":      cp(l.w, B, n),
		"image_features":      cp(l.feat, B, E),
		"text_features":       cp(l.u, n, C, E),
		"mixed_text_features": cp(l.txt, B, C, E),
		"domain_query":        cp(l.q, B, Dv),
		"domain_keys":         cp(l.k, B, n, Dv),
	}
	for k, v := range terms {
		out[k] = &tensor.Tensor{Shape: []int{1}, Data: []float32{float32(v)}}
	}
	opts, err := fixtureTrain(f, s)
	if err != nil {
		return nil, err
	}
	opt, err := opts.NewOptimizer()
	if err != nil {
		return nil, err
	}
	params := trainedParams(P, G, own)
	for _, p := range params {
		out["grad."+p.Name] = &tensor.Tensor{Shape: slices.Clone(G[p.Name].Shape), Data: slices.Clone(p.Grad)}
	}
	if err := opt.Step(opts.Rate(0, 0), params); err != nil {
		return nil, fmt.Errorf("adapt fixture: %w", err)
	}
	for name, t := range P {
		out["step1."+name] = t
	}
	return out, nil
}

// emaTargets reads the optional ema_target.text_prompt.<j> tensors (the
// parameters file first, then the batch file); the own domain has none.
func emaTargets(f *parity.Fixture, P tensor.Named, own int) (tensor.Named, error) {
	recv := tensor.Named{}
	for _, src := range []tensor.Named{f.Params, f.Batch} {
		for _, k := range slices.Sorted(maps.Keys(src)) {
			name, ok := strings.CutPrefix(k, EMATargetPrefix)
			if !ok {
				continue
			}
			if _, seen := recv[name]; seen {
				continue
			}
			p, ok := P[name]
			if !ok || !Relayed(name) || !tensor.SameShape(p.Shape, src[k].Shape) {
				return nil, fmt.Errorf("adapt fixture: tensor %q is not the EMA target of a text prompt of these parameters", k)
			}
			if name == TextName(own) {
				return nil, fmt.Errorf("adapt fixture: tensor %q: domain %d is the client's own, which has no EMA target", k, own)
			}
			recv[name] = src[k].Clone()
		}
	}
	return recv, nil
}

// FixtureRound implements parity.Rounder: one round of ADAPT's production
// plan — every client client<i> (images, labels, domain) starting from the
// parameters, the Relay server, the Coordinator over federation Sites, as
// parity.Round — written as client<i>.trained.<param> (each site's
// parameters after local training) and global.<param> (GlobalModel: the
// averaged visual prompts and AdaLN, each domain's prompt the mean of its
// clients' uploads).
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	s, sh, err := settingsFrom(f)
	if err != nil {
		return nil, err
	}
	m, err := fixtureModel(f)
	if err != nil {
		return nil, err
	}
	tokens, C, err := fixtureTokens(f)
	if err != nil {
		return nil, err
	}
	opts, err := fixtureTrain(f, s)
	if err != nil {
		return nil, err
	}
	var clients []parity.TensorClient
	var doms []int
	for i := 0; ; i++ {
		px, ok := f.Batch[fmt.Sprintf("client%d.images", i)]
		if !ok {
			break
		}
		labels, err := f.IntsOf(fmt.Sprintf("client%d.labels", i))
		if err != nil {
			return nil, err
		}
		d, err := fixtureInt(f, fmt.Sprintf("client%d.domain", i), i)
		if err != nil {
			return nil, err
		}
		clients, doms = append(clients, parity.TensorClient{Pixels: px.Data, Labels: labels}), append(doms, d)
	}
	if len(clients) == 0 {
		return nil, fmt.Errorf("tensor %q missing from the round file", "client0.images")
	}
	for _, src := range []tensor.Named{f.Params, f.Batch} {
		for _, k := range slices.Sorted(maps.Keys(src)) {
			if strings.HasPrefix(k, EMATargetPrefix) {
				return nil, fmt.Errorf("adapt fixture: tensor %q: EMA targets belong to a step; a round starts before any prompt is relayed", k)
			}
		}
	}
	for i, d := range doms {
		if d < 0 || d >= sh.domains {
			return nil, fmt.Errorf("adapt fixture: client %d's domain %d outside 0..%d", i, d, sh.domains-1)
		}
	}
	for d := 0; d < sh.domains; d++ {
		if !slices.Contains(doms, d) {
			return nil, fmt.Errorf("adapt fixture: the parameters hold %d text prompts but no client has domain %d (clients' domains %v)", sh.domains, d, doms)
		}
	}
	// the round draws nothing (batches in stored order, no dropout, every
	// client): no seed
	env, err := parity.TensorEnv(m, 1, tokens, C, clients, opts, 0)
	if err != nil {
		return nil, fmt.Errorf("adapt fixture: %w", err)
	}
	defer env.TrainStore.Close()
	for i, d := range doms {
		env.Task.Clients[i].Domain = d
	}
	env.Init = f.Params
	return roundPlan(ctx, env, s)
}

// roundPlan builds the plan and runs one round as parity.Round does.
func roundPlan(ctx context.Context, env *methods.Env, s *Settings) (tensor.Named, error) {
	plan, err := Method{}.Build(env, s)
	if err != nil {
		return nil, err
	}
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, "")
	}
	coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: 1, Fraction: 1,
		Seed: env.Seed, EvalEvery: 2, Logger: slog.New(slog.DiscardHandler)}
	if _, err := coord.Run(ctx); err != nil {
		return nil, err
	}
	out := tensor.Named{}
	for i := range plan.Clients {
		st, err := plan.Site(i)
		if err != nil {
			return nil, err
		}
		for k, v := range st {
			out[fmt.Sprintf("client%d.trained.%s", i, k)] = v
		}
	}
	for k, v := range plan.Global() {
		out["global."+k] = v
	}
	return out, nil
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"adaln_layers", "batch_size", "client<i>.domain", "domain", "ema", "lambda", "local_epochs",
		"logit_scale", "lr", "momentum", "n_ctx", "optimizer", "tau", "weight_decay",
	}
}

var _ parity.Method = Method{}

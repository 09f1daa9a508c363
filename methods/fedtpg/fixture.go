package fedtpg

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// SettingsFrom implements parity.Settings: n_ctx, d_ctx, depth,
// cross_heads, self_heads, ff_mult from the metadata (the defaults where
// absent), the server's mean from aggregation or weighted_mean; prompt_dim
// and textemb_dim, when given, must be the model's widths.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	if err := prompt.EndOnly(f.Meta["class_token_position"], noPosition); err != nil {
		return nil, fmt.Errorf("fedtpg: metadata %w", err)
	}
	s := fromConfig(DefaultConfig())
	for key, dst := range map[string]*int{"n_ctx": &s.NCtx, "d_ctx": &s.DCtx, "depth": &s.Depth,
		"cross_heads": &s.CrossHeads, "self_heads": &s.SelfHeads, "ff_mult": &s.FFMult} {
		v, err := f.FloatOr(key, float64(*dst))
		if err != nil {
			return nil, err
		}
		if v != float64(int(v)) {
			return nil, fmt.Errorf("hyper-parameter %s=%v: must be an integer", key, v)
		}
		*dst = int(v)
	}
	m := f.Model
	for key, want := range map[string]int{"prompt_dim": m.Text.Cfg.Width, "textemb_dim": m.W.Config.EmbedDim} {
		v, err := f.FloatOr(key, float64(want))
		if err != nil {
			return nil, err
		}
		if int(v) != want {
			return nil, fmt.Errorf("hyper-parameter %s=%v: the model's is %d (FedTPG's widths are the model's)", key, v, want)
		}
	}
	// the fixtures' "aggregation" ("uniform mean …"), or weighted_mean
	agg := f.Meta["aggregation"]
	s.WeightedMean = agg != "" && !strings.HasPrefix(agg, "uniform")
	if v, ok := f.Meta["weighted_mean"]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("hyper-parameter weighted_mean=%q: %w", v, err)
		}
		s.WeightedMean = b
	}
	if err := s.config(0).Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// fixtureLearner builds a learner on the fixture's "tokens" and
// "name_tokens" (derived from tokens when absent) with its parameters.
func fixtureLearner(f *parity.Fixture, s *Settings, tokens, names []int) (*Learner, error) {
	l, err := New(f.Model, tokens, names, s.config(0))
	if err != nil {
		return nil, err
	}
	ls, err := f.FloatOr("logit_scale", float64(f.Model.W.LogitScale))
	if err != nil {
		return nil, err
	}
	l.LogitScale = float32(ls)
	if err := prompt.Load(l.Params(), f.Params); err != nil {
		return nil, fmt.Errorf("fedtpg parameters file: %w", err)
	}
	return l, nil
}

// fixtureRows returns the fixture's prompt rows "tokens" and name rows
// "name_tokens" (derived from the prompt rows when absent).
func fixtureRows(f *parity.Fixture, nCtx int) (tokens, names []int, err error) {
	if tokens, err = f.IntsOf("tokens"); err != nil {
		return nil, nil, err
	}
	if names, ok := f.Ints["name_tokens"]; ok {
		if len(names) != len(tokens) {
			return nil, nil, fmt.Errorf("integer tensor %q: %d ids, %q has %d", "name_tokens", len(names), "tokens", len(tokens))
		}
		return tokens, names, nil
	}
	names, err = NameRows(tokens, f.Model.W.Config.Text.ContextLength, nCtx)
	return tokens, names, err
}

// Step implements parity.Stepper: one step of the generator on the batch
// "images" (encoded here by the frozen image encoder), "labels", "tokens"
// and "name_tokens", then one step of a fresh SGD (lr, momentum,
// weight_decay). It writes the generator's intermediate tensors under the
// fixture's names (name_features, generator_input,
// generator_cross_attention, generator_cross_out, generated_ctx), the
// features, logits, loss, grad.<param> and step1.<param>.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	s := sec.(*Settings)
	tokens, names, err := fixtureRows(f, s.NCtx)
	if err != nil {
		return nil, err
	}
	l, err := fixtureLearner(f, s, tokens, names)
	if err != nil {
		return nil, err
	}
	images, err := f.Tensor("images")
	if err != nil {
		return nil, err
	}
	S := f.Model.W.Config.Vision.ImageSize
	if len(images.Shape) != 4 || images.Shape[1] != 3 || images.Shape[2] != S || images.Shape[3] != S {
		return nil, fmt.Errorf("tensor %q: shape %v, want [B, 3, %d, %d]", "images", images.Shape, S, S)
	}
	labels, err := f.IntsOf("labels")
	if err != nil {
		return nil, err
	}
	B := images.Shape[0]
	if len(labels) != B {
		return nil, fmt.Errorf("integer tensor %q: %d labels for %d images", "labels", len(labels), B)
	}
	img := f.Model.EncodeImage(images.Data, B)
	loss, _, logits, err := l.Step(img, labels)
	if err != nil {
		return nil, err
	}
	K, Emb, Q, W := l.K, l.Emb, l.gen.Cfg.Queries(), l.gen.Cfg.E
	raw, norm := l.NameInputs()
	mk := func(data []float32, shape ...int) *tensor.Tensor {
		return &tensor.Tensor{Shape: shape, Data: slices.Clone(data)}
	}
	out := tensor.Named{
		"name_features":             mk(raw, K, Emb),
		"generator_input":           mk(norm, K, Emb),
		"generator_cross_attention": mk(l.gen.CrossAttention(), s.DCtx, Q/s.DCtx, K),
		"generator_cross_out":       mk(l.gen.CrossOut(), s.DCtx, Q/s.DCtx, W),
		"generated_ctx":             mk(l.gen.Output(), s.DCtx, Q/s.DCtx, W),
		"image_features":            mk(img, B, Emb),
		"text_features":             mk(l.txt, K, Emb),
		"logits":                    mk(logits, B, K),
		"loss":                      prompt.Scalar(loss),
	}
	for name, g := range l.Grads() {
		out["grad."+name] = g.Clone()
	}
	var h [3]float64
	for i, key := range []string{"lr", "momentum", "weight_decay"} {
		if h[i], err = f.Float(key); err != nil {
			return nil, err
		}
	}
	if err := optim.NewSGD(h[1], h[2], false).Step(h[0], prompt.OptimParams(l.Params(), l.Grads())); err != nil {
		return nil, err
	}
	for name, p := range l.Params() {
		out["step1."+name] = p.Clone()
	}
	return out, nil
}

// FixtureRound implements parity.Rounder: one round through parity.Round
// (the production clients in federation Sites, the server's mean, the
// Coordinator) on the clients client<i>.images / client<i>.labels, each over
// its own classes client<i>.classes (indices into "tokens"; labels local,
// 0..K−1; all classes when absent), as the authors' cross-class clients.
// Besides client<i>.trained.<param> and global.<param> it writes
// client<i>.momentum.<param>, the SGD momentum each client keeps for its
// next round.
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	s := sec.(*Settings)
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, err
	}
	tokens, names, err := fixtureRows(f, s.NCtx)
	if err != nil {
		return nil, err
	}
	ctxLen := f.Model.W.Config.Text.ContextLength
	C := len(tokens) / ctxLen
	in := parity.RoundInputs{Model: f.Model, Init: f.Params, Tokens: tokens, Classes: C, Train: opts} // the round draws nothing: no seed
	var classes [][]int
	for i := 0; ; i++ {
		px, ok := f.Batch[fmt.Sprintf("client%d.images", i)]
		if !ok {
			break
		}
		labels, err := f.IntsOf(fmt.Sprintf("client%d.labels", i))
		if err != nil {
			return nil, err
		}
		cl := f.Ints[fmt.Sprintf("client%d.classes", i)]
		for _, c := range cl {
			if c < 0 || c >= C {
				return nil, fmt.Errorf("integer tensor %q: class %d outside 0..%d", fmt.Sprintf("client%d.classes", i), c, C-1)
			}
		}
		for k, y := range labels {
			if cl != nil && (y < 0 || y >= len(cl)) {
				return nil, fmt.Errorf("integer tensor %q: label %d of image %d outside the client's %d classes", fmt.Sprintf("client%d.labels", i), y, k, len(cl))
			}
		}
		in.Clients = append(in.Clients, parity.TensorClient{Pixels: px.Data, Labels: labels})
		classes = append(classes, cl)
	}
	if len(in.Clients) == 0 {
		return nil, fmt.Errorf("tensor %q missing from the round file", "client0.images")
	}
	// the clients' classes are given: each trains over exactly those
	own := *s
	own.OwnClasses = false
	rm := &roundMethod{s: &own, tokens: tokens, names: names, classes: classes}
	out, err := parity.Round(ctx, rm, sec, in)
	if err != nil {
		return nil, err
	}
	for i, c := range rm.plan.Clients {
		st, err := c.State()
		if err != nil {
			return nil, err
		}
		for name, t := range st {
			if p, ok := strings.CutPrefix(name, "opt/momentum_buffer/"); ok {
				m := t.Clone()
				if init, ok := f.Params[p]; ok && len(init.Data) == len(m.Data) {
					m.Shape = slices.Clone(init.Shape)
				}
				out[fmt.Sprintf("client%d.momentum.%s", i, p)] = m
			}
		}
	}
	return out, nil
}

// roundMethod is FedTPG as parity.Round builds it for a fixture: each
// client gets a label space of its own classes, with the fixture's prompt
// and name rows; the plan is kept for the clients' momentum.
type roundMethod struct {
	Method
	s             *Settings
	tokens, names []int
	classes       [][]int
	plan          *methods.Plan
}

func (r *roundMethod) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	ctxLen := env.Model.W.Config.Text.ContextLength
	given := map[int][]int{0: r.names}
	for i, cl := range r.classes {
		if cl == nil {
			continue
		}
		space := len(env.Task.Spaces)
		env.Task.Spaces = append(env.Task.Spaces, protocol.Space{Name: fmt.Sprintf("client%d", i), Classes: slices.Clone(cl)})
		var rows, nr []int
		for _, c := range cl {
			rows = append(rows, r.tokens[c*ctxLen:(c+1)*ctxLen]...)
			nr = append(nr, r.names[c*ctxLen:(c+1)*ctxLen]...)
		}
		env.SpaceTokenRows[space], given[space] = rows, nr
		env.Task.Clients[i].TrainSpace = space
	}
	plan, err := build(env, r.s, given)
	r.plan = plan
	return plan, err
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"aggregation", "batch_size", "class_token_position", "cross_heads", "d_ctx", "depth", "ff_mult",
		"local_epochs", "logit_scale", "lr", "momentum", "n_ctx", "prompt_dim", "self_heads",
		"textemb_dim", "weight_decay", "weighted_mean",
	}
}

var _ parity.Method = Method{}

package fedot

// The reference-fixture contract (`pfedmma step` / `pfedmma round`, README
// "The reference-fixture contract") for FedOT. The fixtures of
// testdata/fedot (an independent float64 PyTorch FedOT; the authors' code
// is not public) are checked through the production client in
// external_test.go; this file's step is the `pfedmma step` replay (the
// conformance step contract runs it on them).

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// SettingsFrom implements parity.Settings. The variant comes from
// the parameter names (x: fedot, w_1: fedlt, adapter.down/up: fedadapter),
// or from the metadata key variant (all_global, all_local: x too); the
// number of blocks r from x's shape [r, d/r, d/r] (a metadata blocks must
// agree); τ from tau, else exp(logit_scale), else the model's;
// normalize_classifier from the key of that name (default false). The
// classifier's init is irrelevant (the fixture gives w_g) and lr is left to
// the fixture's training options.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	s := &Settings{Variant: VariantFedOT, Blocks: 1, Init: "text"}
	_, hasX := f.Params[ParamX]
	_, hasLinear := f.Params[ParamLinear]
	_, hasDown := f.Params[ParamDown]
	switch {
	case hasX:
	case hasLinear:
		s.Variant = VariantFedLT
	case hasDown:
		s.Variant = VariantFedAdapter
	default:
		return nil, fmt.Errorf("fedot: parameters hold none of %q, %q, %q (the local map)", ParamX, ParamLinear, ParamDown)
	}
	if v, ok := f.Meta["variant"]; ok {
		v = strings.TrimSpace(v)
		if !slices.Contains([]string{VariantFedOT, VariantFedLT, VariantFedAdapter, VariantAllGlobal, VariantAllLocal}, v) {
			return nil, fmt.Errorf("fedot: metadata variant %q: want fedot, fedlt, fedadapter, all_global or all_local", v)
		}
		s.Variant = v
	}
	if x, ok := f.Params[ParamX]; ok && s.Variant != VariantFedLT && s.Variant != VariantFedAdapter {
		if len(x.Shape) != 3 || x.Shape[0] < 1 {
			return nil, fmt.Errorf("fedot: parameter %q: shape %v, want [r, d/r, d/r]", ParamX, x.Shape)
		}
		s.Blocks = x.Shape[0]
	}
	if _, ok := f.Meta["blocks"]; ok {
		r, err := f.Float("blocks")
		if err != nil {
			return nil, fmt.Errorf("fedot: %w", err)
		}
		if int(r) != s.Blocks {
			return nil, fmt.Errorf("fedot: metadata blocks %v, but parameter %q holds %d blocks", r, ParamX, s.Blocks)
		}
	}
	switch {
	case f.Meta["tau"] != "":
		tau, err := f.Float("tau")
		if err != nil {
			return nil, fmt.Errorf("fedot: %w", err)
		}
		s.Tau = tau
	case f.Meta["logit_scale"] != "":
		ls, err := f.Float("logit_scale")
		if err != nil {
			return nil, fmt.Errorf("fedot: %w", err)
		}
		s.Tau = math.Exp(ls)
	}
	if !(s.Tau >= 0) || math.IsInf(s.Tau, 0) {
		return nil, fmt.Errorf("fedot: τ %v out of range", s.Tau)
	}
	if v, ok := f.Meta["normalize_classifier"]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("fedot: metadata normalize_classifier=%q: %w", v, err)
		}
		s.NormalizeClassifier = b
	}
	d := f.Model.W.Config.EmbedDim
	if d%s.Blocks != 0 {
		return nil, fmt.Errorf("fedot: %d blocks do not divide the feature dimension %d", s.Blocks, d)
	}
	return s, nil
}

// fixtureParams checks that f holds every parameter of s for d-dimensional
// features (w_g [K, d] gives K) and returns copies of them.
func fixtureParams(s *Settings, f *parity.Fixture, d int) (tensor.Named, int, error) {
	wg, ok := f.Params[ParamClassifier]
	if !ok || len(wg.Shape) != 2 || wg.Shape[1] != d || wg.Shape[0] < 1 {
		return nil, 0, fmt.Errorf("fedot: parameters lack %q [K, %d]", ParamClassifier, d)
	}
	K := wg.Shape[0]
	p := tensor.Named{}
	for name, shape := range s.Shapes(d, K) {
		t, ok := f.Params[name]
		if !ok || !tensor.SameShape(t.Shape, shape) {
			return nil, 0, fmt.Errorf("fedot: parameters lack %q of shape %v", name, shape)
		}
		p[name] = t.Clone()
	}
	return p, K, nil
}

// Step implements parity.Stepper: one FedOT step on the fixture's images
// (frozen image encoder, then the local map and w_g). params holds w_g
// [K, d] and the variant's local map (x [r, d/r, d/r], w_1 or
// adapter.down/up); the batch images [B, 3, S, S] (or image_features
// [B, d]), labels [B] (0..K−1) and
// optionally tokens [K, ctx] (only checked: w_g replaces the text
// features). The result holds image_features [B, d], transformed_features
// (h' [B, d]), w_1 (the local matrix [d, d]; not for fedadapter), logits
// [B, K], loss, grad.<p> and step1.<p> after one SGD step (lr, momentum,
// weight_decay of the metadata) from a fresh optimizer.
func (Method) Step(_ context.Context, f *parity.Fixture) (tensor.Named, error) {
	out, _, err := step(f)
	return out, err
}

// step is Step, also returning the loss in float64.
func step(f *parity.Fixture) (tensor.Named, float64, error) {
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		return nil, 0, err
	}
	s := sec.(*Settings)
	d := f.Model.W.Config.EmbedDim
	p, K, err := fixtureParams(s, f, d)
	if err != nil {
		return nil, 0, err
	}
	if tokens, ok := f.Ints["tokens"]; ok && len(tokens) != K*f.Model.W.Config.Text.ContextLength {
		return nil, 0, fmt.Errorf("fedot: tensor \"tokens\": %d ids, want %d classes (the rows of %q) of %d", len(tokens), K, ParamClassifier, f.Model.W.Config.Text.ContextLength)
	}
	img, labels, err := fixtureBatch(f, K)
	if err != nil {
		return nil, 0, err
	}
	B := len(labels)
	tau := float32(math.Exp(float64(f.Model.W.LogitScale)))
	if s.Tau > 0 {
		tau = float32(s.Tau)
	}
	w, err := NewModel(s, d, K, tau)
	if err != nil {
		return nil, 0, err
	}
	classes := make([]int, K)
	for i := range classes {
		classes[i] = i
	}
	loss, _, err := w.Step(p, img, labels, classes)
	if err != nil {
		return nil, 0, err
	}
	out := tensor.Named{
		"image_features":       {Shape: []int{B, d}, Data: slices.Clone(img)},
		"transformed_features": {Shape: []int{B, d}, Data: slices.Clone(w.hp[:B*d])},
		"logits":               {Shape: []int{B, K}, Data: slices.Clone(w.logits[:B*K])},
		"loss":                 {Shape: []int{1}, Data: []float32{float32(loss)}},
	}
	if w1, err := w.LocalMatrix(p); err != nil {
		return nil, 0, err
	} else if w1 != nil {
		out["w_1"] = &tensor.Tensor{Shape: []int{d, d}, Data: w1}
	}
	names := slices.Sorted(maps.Keys(p))
	var ps []optim.Param
	for _, n := range names {
		out["grad."+n] = w.Grads[n].Clone()
		ps = append(ps, optim.Param{Name: n, Value: p[n].Data, Grad: w.Grads[n].Data})
	}
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, 0, fmt.Errorf("fedot: %w", err)
	}
	opt, err := opts.NewOptimizer()
	if err != nil {
		return nil, 0, err
	}
	if err := opt.Step(opts.LR, ps); err != nil {
		return nil, 0, fmt.Errorf("fedot: %w", err)
	}
	for _, n := range names {
		out["step1."+n] = p[n]
	}
	return out, loss, nil
}

// fixtureBatch returns the frozen image features [B, d] of the fixture's
// images (as the production path caches them), or its image_features when
// given, and its labels, each in 0..K−1.
func fixtureBatch(f *parity.Fixture, K int) ([]float32, []int, error) {
	labels, err := f.Labels(K)
	if err != nil {
		return nil, nil, fmt.Errorf("fedot: %w", err)
	}
	img, err := f.ImageFeatures(len(labels))
	if err != nil {
		return nil, nil, fmt.Errorf("fedot: %w", err)
	}
	return img, labels, nil
}

// FixtureRound implements parity.Rounder: the plain round of
// parity.RunRound (the production Plan in federation Sites, the
// uniform mean, the Coordinator), reporting as client<i>.trained.<p> the
// client's parameters after its local training (w_g and the local map;
// not the Site's class-name entry).
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return parity.PlainRound(ctx, f, Method{}, parity.OwnSites(Method{}, func(c *client.Client) tensor.Named { return c.P }))
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "blocks", "local_epochs", "logit_scale", "lr", "momentum", "normalize_classifier",
		"tau", "variant", "weight_decay",
	}
}

var _ parity.Method = Method{}

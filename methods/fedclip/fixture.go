package fedclip

// The reference-fixture contract (`pfedmma step` / `pfedmma round`, README
// "The reference-fixture contract") for FedCLIP, checked against
// testdata/fedclip (PMFLT's code on the tiny CLIP).

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// SettingsFrom implements parity.Settings. FedCLIP has no setting
// a fixture carries; the metadata's feature_dim and logit_scale, when
// present, must agree with the model (the adapter is d × d on its
// embedding, the logits use its logit_scale).
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	d := f.Model.W.Config.EmbedDim
	if _, ok := f.Meta["feature_dim"]; ok {
		fd, err := f.Float("feature_dim")
		if err != nil {
			return nil, fmt.Errorf("fedclip: %w", err)
		}
		if int(fd) != d {
			return nil, fmt.Errorf("fedclip: metadata feature_dim %v, but the model's embedding has %d dimensions", fd, d)
		}
	}
	if _, ok := f.Meta["logit_scale"]; ok {
		ls, err := f.Float("logit_scale")
		if err != nil {
			return nil, fmt.Errorf("fedclip: %w", err)
		}
		if m := float64(f.Model.W.LogitScale); math.Abs(ls-m) > 1e-6*(1+math.Abs(m)) {
			return nil, fmt.Errorf("fedclip: metadata logit_scale %v differs from the model's %v (the method scores with the model's)", ls, m)
		}
	}
	if _, err := checked(f.Params, d, "parameters"); err != nil {
		return nil, err
	}
	return Method{}.DefaultConfig(), nil
}

// Step implements parity.Stepper: one FedCLIP step on the fixture's
// images. params holds img_adap.{0,2}.{weight,bias}; the batch images
// [B, 3, S, S] (or, without images, image_features [B, d]), labels [B] and tokens [C, ctx]
// (the class prompts, encoded by the frozen text tower; image b's text is
// row labels[b]). The result holds image_features [B, d] (before the
// adapter), adapter_attention [B, d], text_features [B, d] (each image's
// class prompt, before normalisation), logits [B, B], loss_img, loss_txt,
// loss, grad.<p> and step1.<p> after one step of the metadata's optimizer
// (lr, momentum, weight_decay) from a fresh state.
func (Method) Step(_ context.Context, f *parity.Fixture) (tensor.Named, error) {
	out, _, err := step(f)
	return out, err
}

// step is Step, also returning the loss in float64.
func step(f *parity.Fixture) (tensor.Named, float64, error) {
	if _, err := (Method{}).SettingsFrom(f); err != nil {
		return nil, 0, err
	}
	model := f.Model
	d := model.W.Config.EmbedDim
	p, err := checked(f.Params, d, "parameters")
	if err != nil {
		return nil, 0, err
	}
	tokens, C, err := f.ClassTokens()
	if err != nil {
		return nil, 0, fmt.Errorf("fedclip: %w", err)
	}
	labels, err := f.Labels(C)
	if err != nil {
		return nil, 0, fmt.Errorf("fedclip: %w", err)
	}
	B := len(labels)
	if B == 0 {
		return nil, 0, fmt.Errorf("fedclip: tensor \"labels\" is empty")
	}
	methods.DetachAll(model)
	var img []float32
	if images, ok := f.Batch["images"]; ok || f.Batch["image_features"] == nil {
		if !ok {
			return nil, 0, fmt.Errorf("fedclip: tensor \"images\" missing from the batch file (or give \"image_features\")")
		}
		S := model.W.Config.Vision.ImageSize
		if len(images.Data) != B*3*S*S {
			return nil, 0, fmt.Errorf("fedclip: tensor \"images\": shape %v for %d labels, want [%d, 3, %d, %d]", images.Shape, B, B, S, S)
		}
		img = prefixcache.ImageRecords(model, methods.Features, images.Data, B, nil)
	} else {
		t := f.Batch["image_features"]
		if len(t.Data) != B*d {
			return nil, 0, fmt.Errorf("fedclip: tensor \"image_features\": shape %v for %d labels, want [%d, %d]", t.Shape, B, B, d)
		}
		img = slices.Clone(t.Data)
	}
	txt, err := model.EncodeText(tokens, C)
	if err != nil {
		return nil, 0, fmt.Errorf("fedclip: text features: %w", err)
	}
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, 0, fmt.Errorf("fedclip: %w", err)
	}
	w := newModel(d, model.W.LogitScale)
	loss, _ := w.Step(p, img, labels, txt)
	out := tensor.Named{
		"image_features":    {Shape: []int{B, d}, Data: img},
		"adapter_attention": {Shape: []int{B, d}, Data: slices.Clone(w.a[:B*d])},
		"text_features":     {Shape: []int{B, d}, Data: slices.Clone(w.tb[:B*d])},
		"logits":            {Shape: []int{B, B}, Data: slices.Clone(w.Loss.logits[:B*B])},
		"loss":              {Shape: []int{1}, Data: []float32{float32(loss)}},
		"loss_img":          {Shape: []int{1}, Data: []float32{float32(w.Loss.LossImg)}},
		"loss_txt":          {Shape: []int{1}, Data: []float32{float32(w.Loss.LossTxt)}},
	}
	var ps []optim.Param
	for _, n := range Names {
		out["grad."+n] = w.Grads[n].Clone()
		ps = append(ps, optim.Param{Name: n, Value: p[n].Data, Grad: w.Grads[n].Data})
	}
	opt, err := opts.NewOptimizer()
	if err != nil {
		return nil, 0, err
	}
	if err := opt.Step(opts.LR, ps); err != nil {
		return nil, 0, fmt.Errorf("fedclip: %w", err)
	}
	for _, n := range Names {
		out["step1."+n] = p[n]
	}
	return out, loss, nil
}

// FixtureRound implements parity.Rounder: the plain round of
// parity.RunRound (the production Plan in federation Sites, FedAvg,
// the Coordinator), reporting as client<i>.trained.<p> the adapter each
// client holds after its local training — the production Plan.Site gives
// the server's average instead, the model a site keeps and is scored with
// — and as client<i>.batch_losses the loss of each of its batches.
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	var losses []*[]float32
	own := parity.OwnSites(Method{}, func(c *client.Client) tensor.Named { return c.P })
	out, err := parity.PlainRound(ctx, f, Method{}, func(env *methods.Env, sec config.Section) (*methods.Plan, error) {
		plan, err := own(env, sec)
		if err != nil {
			return nil, err
		}
		for i, pc := range plan.Clients {
			c, ok := pc.(*client.Client)
			if !ok {
				return nil, fmt.Errorf("fedclip: client %d is a %T", i, pc)
			}
			l := new([]float32)
			c.OnLoss(func(loss float64) { *l = append(*l, float32(loss)) })
			losses = append(losses, l)
		}
		return plan, nil
	})
	if err != nil {
		return nil, err
	}
	for i, l := range losses {
		out[fmt.Sprintf("client%d.batch_losses", i)] = &tensor.Tensor{Shape: []int{len(*l)}, Data: *l}
	}
	return out, nil
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "feature_dim", "local_epochs", "logit_scale", "lr", "momentum", "weight_decay",
	}
}

var _ parity.Method = Method{}

package pfedmma

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// SettingsFrom implements parity.Settings: the adapted blocks and
// the width come from the parameter names and shapes (or adapter_start,
// adapter_end, adapter_dim), the scale from adapter_scale.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	lo, hi, dim := -1, -1, 0
	for name, t := range f.Params {
		rest, ok := strings.CutPrefix(name, prefix+"shared_adapter.")
		if !ok {
			continue
		}
		j, err := strconv.Atoi(rest[:strings.IndexByte(rest+".", '.')])
		if err != nil {
			return nil, fmt.Errorf("parameter %q: %w", name, err)
		}
		if lo < 0 || j < lo {
			lo = j
		}
		hi = max(hi, j)
		if strings.HasSuffix(name, ".weight") && len(t.Shape) == 2 {
			dim = t.Shape[0]
		}
	}
	if lo < 0 {
		return nil, fmt.Errorf("parameters hold no %sshared_adapter.<block>.0.weight", prefix)
	}
	s := &Settings{Start: lo, End: hi, Dim: dim, Activation: "relu"}
	var err error
	for key, dst := range map[string]*int{"adapter_start": &s.Start, "adapter_end": &s.End, "adapter_dim": &s.Dim} {
		if _, ok := f.Meta[key]; ok {
			v, e := f.Float(key)
			if e != nil {
				return nil, e
			}
			*dst = int(v)
		}
	}
	if s.Scale, err = f.Float("adapter_scale"); err != nil {
		return nil, err
	}
	return s, nil
}

// Step implements parity.Stepper on the mma-* fixtures' layout.
func (m Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	sec, err := m.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	s := sec.(*Settings)
	c := f.Model.W.Config
	cfg, err := s.Adapters(min(c.Vision.Layers, c.Text.Layers))
	if err != nil {
		return nil, err
	}
	a := New(cfg, c.Vision.Width, c.Text.Width, nil)
	if err := a.Load(f.Params); err != nil {
		return nil, err
	}
	l, err := NewLearner(f.Model, a, nil)
	if err != nil {
		return nil, err
	}
	l.Attach()
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		return nil, err
	}
	C := len(tokens) / c.Text.ContextLength
	if err := l.SetClasses(tokens, C); err != nil {
		return nil, err
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
	if len(images.Data) != B*3*c.Vision.ImageSize*c.Vision.ImageSize {
		return nil, fmt.Errorf("tensor \"images\": shape %v for %d labels of %d px", images.Shape, B, c.Vision.ImageSize)
	}
	for _, y := range labels {
		if y < 0 || y >= C {
			return nil, fmt.Errorf("tensor \"labels\": label %d outside 0..%d", y, C-1)
		}
	}
	prefix := clip.ImagePrefix(f.Model, cfg.Start, images.Data, B, nil)
	a.ZeroGrads()
	loss, logits, err := l.Step(prefix, B, labels)
	if err != nil {
		return nil, err
	}
	E := c.EmbedDim
	out := tensor.Named{
		"image_features": {Shape: []int{B, E}, Data: append([]float32(nil), l.imgFeat...)},
		"text_features":  {Shape: []int{C, E}, Data: append([]float32(nil), l.txtFeat...)},
		"logits":         {Shape: []int{B, C}, Data: append([]float32(nil), logits...)},
		"loss":           {Shape: []int{1}, Data: []float32{float32(loss)}},
	}
	var ps []optim.Param
	for _, n := range a.Names() {
		out["grad."+n] = a.Grads[n].Clone()
		ps = append(ps, optim.Param{Name: n, Value: a.Params[n].Data, Grad: a.Grads[n].Data})
	}
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, err
	}
	opt, err := opts.NewOptimizer()
	if err != nil {
		return nil, err
	}
	if err := opt.Step(opts.LR, ps); err != nil {
		return nil, err
	}
	for _, n := range a.Names() {
		out["step1."+n] = a.Params[n].Clone()
	}
	return out, nil
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"adapter_dim", "adapter_end", "adapter_scale", "adapter_start", "batch_size", "local_epochs", "lr",
		"momentum", "weight_decay",
	}
}

var _ parity.Method = Method{}

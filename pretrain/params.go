package pretrain

import (
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/optim"
)

// paramSet is every trainable tensor of a CLIP model with its gradient,
// split as CLIP's training code splits them: weight decay applies to the
// matrices (decay), not to gains, biases, embeddings or the logit scale.
type paramSet struct {
	decay, noDecay []optim.Param
}

// all returns both groups.
func (p paramSet) all() []optim.Param {
	return append(append([]optim.Param(nil), p.decay...), p.noDecay...)
}

// newParamSet pairs the tensors of w with those of its gradient g. ls and
// gls hold the logit scale and its gradient (one element each).
func newParamSet(w, g *clip.Weights, ls, gls []float32) paramSet {
	var p paramSet
	add := func(decay bool, name string, v, gv []float32) {
		q := optim.Param{Name: name, Value: v, Grad: gv}
		if decay {
			p.decay = append(p.decay, q)
		} else {
			p.noDecay = append(p.noDecay, q)
		}
	}
	blocks := func(prefix string, ws, gs []clip.BlockWeights) {
		for i := range ws {
			b, gb := &ws[i], &gs[i]
			n := fmt.Sprintf("%s.resblocks.%d.", prefix, i)
			add(false, n+"ln_1.weight", b.Ln1W, gb.Ln1W)
			add(false, n+"ln_1.bias", b.Ln1B, gb.Ln1B)
			add(true, n+"attn.in_proj_weight", b.InProjW, gb.InProjW)
			add(false, n+"attn.in_proj_bias", b.InProjB, gb.InProjB)
			add(true, n+"attn.out_proj.weight", b.OutProjW, gb.OutProjW)
			add(false, n+"attn.out_proj.bias", b.OutProjB, gb.OutProjB)
			add(false, n+"ln_2.weight", b.Ln2W, gb.Ln2W)
			add(false, n+"ln_2.bias", b.Ln2B, gb.Ln2B)
			add(true, n+"mlp.c_fc.weight", b.FcW, gb.FcW)
			add(false, n+"mlp.c_fc.bias", b.FcB, gb.FcB)
			add(true, n+"mlp.c_proj.weight", b.ProjW, gb.ProjW)
			add(false, n+"mlp.c_proj.bias", b.ProjB, gb.ProjB)
		}
	}
	v, gv := &w.Vision, &g.Vision
	add(true, "visual.conv1.weight", v.Conv1W, gv.Conv1W)
	add(false, "visual.class_embedding", v.ClassEmb, gv.ClassEmb)
	add(false, "visual.positional_embedding", v.PosEmb, gv.PosEmb)
	add(false, "visual.ln_pre.weight", v.LnPreW, gv.LnPreW)
	add(false, "visual.ln_pre.bias", v.LnPreB, gv.LnPreB)
	blocks("visual.transformer", v.Blocks, gv.Blocks)
	add(false, "visual.ln_post.weight", v.LnPostW, gv.LnPostW)
	add(false, "visual.ln_post.bias", v.LnPostB, gv.LnPostB)
	add(true, "visual.proj", v.Proj, gv.Proj)
	t, gt := &w.Text, &g.Text
	add(false, "token_embedding.weight", t.TokenEmb, gt.TokenEmb)
	add(false, "positional_embedding", t.PosEmb, gt.PosEmb)
	blocks("transformer", t.Blocks, gt.Blocks)
	add(false, "ln_final.weight", t.LnFinalW, gt.LnFinalW)
	add(false, "ln_final.bias", t.LnFinalB, gt.LnFinalB)
	add(true, "text_projection", t.Proj, gt.Proj)
	add(false, "logit_scale", ls, gls)
	return p
}

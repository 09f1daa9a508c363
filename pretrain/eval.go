package pretrain

import (
	"context"
	"fmt"
	"image"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// ZeroShot is a zero-shot classification result.
type ZeroShot struct {
	// Classes is the number of candidate class names (K-way).
	Classes int `json:"classes"`
	// Images is the number of test images classified.
	Images int `json:"images"`
	// Top1 is the fraction classified correctly.
	Top1 float64 `json:"top1"`
	// Chance is 1/Classes.
	Chance float64 `json:"chance"`
}

// Metrics is the final evaluation of a pretrained model on the world's test
// split, with the prompt PromptTemplates[0] ("a photo of a {class}.").
type Metrics struct {
	// SeenAll and HeldOutAll classify images of seen and of held-out
	// compositions among all 256 class names.
	SeenAll    ZeroShot `json:"seen_all"`
	HeldOutAll ZeroShot `json:"heldout_all"`
	// SeenOnly classifies seen images among the seen names; HeldOutOnly
	// held-out images among the held-out names (novel-class zero-shot).
	SeenOnly    ZeroShot `json:"seen_only"`
	HeldOutOnly ZeroShot `json:"heldout_only"`
	// PatchSeenOnly and PatchHeldOutOnly are SeenOnly and HeldOutOnly
	// classified from the patch tokens instead of the class token: each
	// image's PatchFeatures (the mean of its unit ln_post→proj patch
	// features) against the class prompts.
	PatchSeenOnly    ZeroShot `json:"patch_seen_only"`
	PatchHeldOutOnly ZeroShot `json:"patch_heldout_only"`
}

// PatchFeatures runs the whole image encoder on pixels [B, 3, S, S] and
// returns each image's patch-token feature [B, E]: the mean over its patch
// tokens of their unit-normalised ln_post→proj outputs (DensePool).
func PatchFeatures(m *clip.Model, pixels []float32, B int) []float32 {
	v, c := m.Vision, m.W.Config
	T, E := c.Vision.Tokens(), c.EmbedDim
	tokens := v.Stack.Forward(v.EmbedForward(pixels, B), B, T, 0, len(v.Stack.Blocks), nil, false)
	feat := make([]float32, B*T*E)
	v.HeadForward(feat, tokens, B*T)
	out := make([]float32, B*E)
	DensePool(out, feat, B, T, E)
	return out
}

// ClassText encodes the prompt template (with {} for the class name) of
// every class with m and returns the features [len(names), E].
func ClassText(m *clip.Model, tok *tokenizer.Tokenizer, template string, names []string) ([]float32, error) {
	C := m.W.Config.Text.ContextLength
	tokens := make([]int, 0, len(names)*C)
	for _, n := range names {
		ids, err := tok.Tokenize(Prompt(template, n), C, true)
		if err != nil {
			return nil, fmt.Errorf("pretrain: class prompt %q: %w", n, err)
		}
		tokens = append(tokens, ids...)
	}
	return m.EncodeText(tokens, len(names))
}

// EvalWorld classifies perClass test-split images of each composition in
// classes (styles in turn) among the class names of candidates, which must
// contain classes, using the prompt template. It returns the top-1 result.
func EvalWorld(ctx context.Context, m *clip.Model, tok *tokenizer.Tokenizer, w *world.World, classes, candidates []world.Composition, perClass int, template string) (ZeroShot, error) {
	return evalWorld(ctx, m, tok, w, classes, candidates, perClass, template, m.EncodeImage)
}

// EvalWorldPatches is EvalWorld classifying each image by its
// PatchFeatures instead of its class token.
func EvalWorldPatches(ctx context.Context, m *clip.Model, tok *tokenizer.Tokenizer, w *world.World, classes, candidates []world.Composition, perClass int, template string) (ZeroShot, error) {
	return evalWorld(ctx, m, tok, w, classes, candidates, perClass, template, func(px []float32, B int) []float32 { return PatchFeatures(m, px, B) })
}

// evalWorld is EvalWorld with the image features given by encode.
func evalWorld(ctx context.Context, m *clip.Model, tok *tokenizer.Tokenizer, w *world.World, classes, candidates []world.Composition, perClass int, template string,
	encode func(pixels []float32, B int) []float32) (ZeroShot, error) {
	res := ZeroShot{Classes: len(candidates)}
	if len(candidates) == 0 {
		return res, fmt.Errorf("pretrain: zero-shot evaluation without candidate classes")
	}
	res.Chance = 1 / float64(len(candidates))
	label := make(map[world.Composition]int, len(candidates))
	names := make([]string, len(candidates))
	for i, c := range candidates {
		label[c] = i
		names[i] = c.Name()
	}
	txt, err := ClassText(m, tok, template, names)
	if err != nil {
		return res, err
	}
	S := m.W.Config.Vision.ImageSize
	lut := newPixelLUT()
	type sample struct {
		spec  world.Spec
		label int
	}
	var all []sample
	for _, c := range classes {
		l, ok := label[c]
		if !ok {
			return res, fmt.Errorf("pretrain: zero-shot evaluation: class %q is not a candidate", c.Name())
		}
		for i := range perClass {
			all = append(all, sample{world.Spec{Split: world.TestSplit, Class: c, Domain: world.Domain(i % world.NumDomains), Index: i}, l})
		}
	}
	const chunk = 64
	n := 3 * S * S
	pixels := make([]float32, chunk*n)
	img := image.NewRGBA(image.Rect(0, 0, S, S))
	correct := 0
	for lo := 0; lo < len(all); lo += chunk {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		hi := min(lo+chunk, len(all))
		for k, s := range all[lo:hi] {
			if err := w.RenderInto(img, s.spec); err != nil {
				return res, fmt.Errorf("pretrain: zero-shot evaluation: %w", err)
			}
			lut.normalize(pixels[k*n:k*n+n], img)
		}
		B := hi - lo
		feat := encode(pixels[:B*n], B)
		logits := clip.Logits(feat, txt, B, len(candidates), m.W.Config.EmbedDim, m.W.LogitScale)
		for k := range B {
			row := logits[k*len(candidates) : (k+1)*len(candidates)]
			best := 0
			for j, v := range row {
				if v > row[best] {
					best = j
				}
			}
			if best == all[lo+k].label {
				correct++
			}
		}
	}
	res.Images = len(all)
	if res.Images > 0 {
		res.Top1 = float64(correct) / float64(res.Images)
	}
	return res, nil
}

// Evaluate computes Metrics for m on w with perClass test images per
// composition.
func Evaluate(ctx context.Context, m *clip.Model, tok *tokenizer.Tokenizer, w *world.World, perClass int) (Metrics, error) {
	var out Metrics
	all, seen, held := w.Classes(), w.Seen(), w.HeldOut()
	tpl := PromptTemplates[0]
	var err error
	if out.SeenAll, err = EvalWorld(ctx, m, tok, w, seen, all, perClass, tpl); err != nil {
		return out, err
	}
	if out.SeenOnly, err = EvalWorld(ctx, m, tok, w, seen, seen, perClass, tpl); err != nil {
		return out, err
	}
	if out.PatchSeenOnly, err = EvalWorldPatches(ctx, m, tok, w, seen, seen, perClass, tpl); err != nil {
		return out, err
	}
	if len(held) > 0 {
		if out.HeldOutAll, err = EvalWorld(ctx, m, tok, w, held, all, perClass, tpl); err != nil {
			return out, err
		}
		if out.HeldOutOnly, err = EvalWorld(ctx, m, tok, w, held, held, perClass, tpl); err != nil {
			return out, err
		}
		if out.PatchHeldOutOnly, err = EvalWorldPatches(ctx, m, tok, w, held, held, perClass, tpl); err != nil {
			return out, err
		}
	}
	return out, nil
}

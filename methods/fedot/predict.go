package fedot

import (
	"fmt"
	"math"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/tensor"
)

// Predictor implements methods.Method: the site's w_1 on the frozen image
// encoder and its w_g rows of the requested classes; a class the site's
// classifier has no row for is scored with its prompt's normalised text
// features (its untrained initial row).
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	wg, ok := saved[ParamClassifier]
	if !ok || len(wg.Shape) != 2 {
		return nil, fmt.Errorf("fedot: saved site lacks %q [K, d]", ParamClassifier)
	}
	ct, ok := saved[SiteClasses]
	if !ok {
		return nil, fmt.Errorf("fedot: saved site lacks %q", SiteClasses)
	}
	b, err := federation.TensorBytes(ct)
	if err != nil {
		return nil, fmt.Errorf("fedot: saved site %q: %w", SiteClasses, err)
	}
	names := strings.Split(string(b), "\n")
	K, d := wg.Shape[0], wg.Shape[1]
	if len(names) != K || d != pe.Model.W.Config.EmbedDim {
		return nil, fmt.Errorf("fedot: saved classifier [%d, %d] for %d class names and %d-dimensional features", K, d, len(names), pe.Model.W.Config.EmbedDim)
	}
	tau := float32(math.Exp(float64(pe.Model.W.LogitScale)))
	if s.Tau > 0 {
		tau = float32(s.Tau)
	}
	m, err := NewModel(s, d, K+1, tau)
	if err != nil {
		return nil, err
	}
	p := tensor.Named{}
	for name := range m.Grads {
		t, ok := saved[name]
		if name == ParamClassifier {
			continue
		}
		if !ok || !tensor.SameShape(t.Shape, m.Grads[name].Shape) {
			return nil, fmt.Errorf("fedot: saved site lacks %q of shape %v", name, m.Grads[name].Shape)
		}
		p[name] = t
	}
	if err := m.Prepare(p); err != nil {
		return nil, err
	}
	row := map[string]int{}
	for i, n := range names {
		row[n] = i
	}
	return &predictor{pe: pe, m: m, p: p, wg: wg, row: row}, nil
}

type predictor struct {
	pe  methods.PredictEnv
	m   *Model
	p   tensor.Named
	wg  *tensor.Tensor
	row map[string]int
}

func (pr *predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	d, C := pr.m.D, len(classes)
	// w [C, d]: the saved rows, or the text features of unknown classes.
	w := tensor.New(C, d)
	var missing []int
	for i, c := range classes {
		if r, ok := pr.row[c]; ok {
			copy(w.Data[i*d:(i+1)*d], pr.wg.Data[r*d:(r+1)*d])
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		var names []string
		for _, i := range missing {
			names = append(names, classes[i])
		}
		tokens, err := pr.pe.Tokens(names)
		if err != nil {
			return nil, err
		}
		txt, err := pr.pe.Model.EncodeText(tokens, len(names))
		if err != nil {
			return nil, err
		}
		clip.NormalizeRows(nil, txt, len(names), d)
		for k, i := range missing {
			copy(w.Data[i*d:(i+1)*d], txt[k*d:(k+1)*d])
		}
	}
	methods.DetachAll(pr.pe.Model)
	img := append([]float32(nil), pr.pe.Model.EncodeImage(pixels, B)...)
	p := tensor.Named{ParamClassifier: w}
	for k, v := range pr.p {
		p[k] = v
	}
	idx := make([]int, C)
	for i := range idx {
		idx[i] = i
	}
	m := *pr.m
	m.K = C
	out, err := m.Logits(p, img, B, idx)
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), out...), nil
}

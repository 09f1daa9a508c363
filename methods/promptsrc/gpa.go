package promptsrc

import (
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// GaussianWeights returns PromptSRC's Gaussian prompt-aggregation weights
// over the epochs e = 1..E: w_e = N(e; mean, std²) / Σ_e' N(e'; mean, std²)
// (the authors' trainer: over 1..MAX_EPOCH with the config's GPA_MEAN and
// GPA_STD). The normal's constant cancels; the exponents are shifted by
// their largest so that far-off means do not underflow to 0/0.
func GaussianWeights(E int, mean, std float64) ([]float64, error) {
	if E < 1 {
		return nil, fmt.Errorf("promptsrc: GPA over %d epochs", E)
	}
	if !(std > 0) || math.IsInf(std, 0) || math.IsNaN(mean) || math.IsInf(mean, 0) {
		return nil, fmt.Errorf("promptsrc: GPA mean %g, std %g: std must be positive and both finite", mean, std)
	}
	ex := make([]float64, E)
	top := math.Inf(-1)
	for e := range ex {
		z := (float64(e+1) - mean) / std
		ex[e] = -0.5 * z * z
		top = math.Max(top, ex[e])
	}
	var sum float64
	for e := range ex {
		ex[e] = math.Exp(ex[e] - top)
		sum += ex[e]
	}
	for e := range ex {
		ex[e] /= sum
	}
	return ex, nil
}

// gpa accumulates Σ_e w_e·θ_e over the epochs of one local training.
type gpa struct {
	w   []float64
	acc map[string][]float64
}

// add adds w[e]·p (e 0-based) to the sum.
func (g *gpa) add(e int, p tensor.Named) {
	if g.acc == nil {
		g.acc = map[string][]float64{}
	}
	for name, t := range p {
		a := g.acc[name]
		if a == nil {
			a = make([]float64, len(t.Data))
			g.acc[name] = a
		}
		for i, v := range t.Data {
			a[i] += g.w[e] * float64(v)
		}
	}
}

// into writes the sum into p's tensors.
func (g *gpa) into(p tensor.Named) {
	for name, t := range p {
		if a, ok := g.acc[name]; ok {
			for i := range t.Data {
				t.Data[i] = float32(a[i])
			}
		}
	}
}

// gpaSite is a client's Gaussian prompt aggregation over its local epochs:
// before the first batch of epoch e+1 it adds w_e·P (the state after epoch
// e); after the last epoch it adds that epoch's state and replaces P by the
// sum, which the client uploads, evaluates and trains on next round.
// Training continues from the unweighted state, as in the authors' trainer.
type gpaSite struct {
	c         *client.Client
	mean, std float64
	g         gpa
	epoch     int // the epoch of the last batch; −1 before the first
}

// StartFit implements client.Reporter: a fresh sum for each local training.
func (s *gpaSite) StartFit() { s.g, s.epoch = gpa{}, -1 }

// Report implements client.Reporter (nothing to add).
func (s *gpaSite) Report(int, map[string]float64) error { return nil }

// BeforeStep implements client.BeforeStepper.
func (s *gpaSite) BeforeStep(b train.Batch) error {
	if s.g.w == nil {
		w, err := GaussianWeights(max(s.c.TrainOptions().Epochs, 1), s.mean, s.std)
		if err != nil {
			return err
		}
		s.g.w = w
	}
	if b.Epoch != s.epoch {
		if s.epoch >= 0 {
			s.g.add(s.epoch, s.c.P)
		}
		s.epoch = b.Epoch
	}
	return nil
}

// Upload implements client.Uploader: the last epoch's state joins the sum,
// P becomes the sum, and its shared tensors are uploaded.
func (s *gpaSite) Upload() tensor.Named {
	if s.epoch >= 0 && s.g.w != nil {
		s.g.add(s.epoch, s.c.P)
		s.g.into(s.c.P)
	}
	return s.c.SharedTensors()
}

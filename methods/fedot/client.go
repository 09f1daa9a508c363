package fedot

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/clientbase"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// Model is one FedOT model (a client's parameters) with the layers and
// buffers a step needs: the clients of a method share one Model's buffers
// (they run one at a time).
type Model struct {
	S    *Settings
	D, K int
	Tau  float32
	// Grads has the shapes of the parameters.
	Grads tensor.Named

	cay  *Cayley
	ad   Adapter
	head Head

	hp, dhp, rows, drows, logits, dlogits []float32
}

// NewModel returns the layers of settings s on d-dimensional features and
// K classes, τ = tau.
func NewModel(s *Settings, d, K int, tau float32) (*Model, error) {
	m := &Model{S: s, D: d, K: K, Tau: tau, Grads: tensor.Named{}, head: Head{Cosine: s.NormalizeClassifier}}
	for name, shape := range s.Shapes(d, K) {
		m.Grads[name] = tensor.New(shape...)
	}
	if _, ok := m.Grads[ParamX]; ok {
		c, err := NewCayley(d, s.Blocks)
		if err != nil {
			return nil, err
		}
		m.cay = c
	}
	return m, nil
}

func newWork(env *methods.Env, s *Settings, d, K int) (*Model, error) {
	tau := float32(math.Exp(float64(env.Model.W.LogitScale)))
	if s.Tau > 0 {
		tau = float32(s.Tau)
	}
	return NewModel(s, d, K, tau)
}

// Prepare readies the local map for p's parameters (factors the Cayley
// transform): call it after p's X changed, before Transform.
func (m *Model) Prepare(p tensor.Named) error {
	if m.cay != nil {
		return m.cay.Factor(p[ParamX].Data)
	}
	return nil
}

// Transform writes h' [B, d] (owned by m) of features h [B, d].
func (m *Model) Transform(p tensor.Named, h []float32, B int) ([]float32, error) {
	d := m.D
	m.hp = nn.Grow(m.hp, B*d)
	switch {
	case m.cay != nil:
		if err := m.cay.Forward(m.hp, h, B); err != nil {
			return nil, err
		}
	case p[ParamLinear] != nil:
		LinearForward(m.hp, h, p[ParamLinear].Data, B, d)
	default:
		k := p[ParamDown].Shape[0]
		m.ad.Forward(m.hp, h, p[ParamDown].Data, p[ParamUp].Data, B, d, k)
	}
	return m.hp, nil
}

// Logits scores features h [B, d] against the classes (dataset labels) of
// a label space with p's parameters: [B, len(classes)], owned by m. Prepare
// must have run for p.
func (m *Model) Logits(p tensor.Named, h []float32, B int, classes []int) ([]float32, error) {
	hp, err := m.Transform(p, h, B)
	if err != nil {
		return nil, err
	}
	C, d := len(classes), m.D
	m.rows = nn.Grow(m.rows, C*d)
	wg := p[ParamClassifier].Data
	for i, c := range classes {
		if c < 0 || c >= m.K {
			return nil, fmt.Errorf("fedot: class %d outside the classifier's %d rows", c, m.K)
		}
		copy(m.rows[i*d:(i+1)*d], wg[c*d:(c+1)*d])
	}
	m.logits = nn.Grow(m.logits, B*C)
	m.head.Forward(m.logits, hp, m.rows, B, C, d, m.Tau)
	return m.logits, nil
}

// Step computes the mean cross entropy of a batch of features h [B, d]
// with labels (indices into classes) and overwrites m.Grads with its
// gradients; it returns the loss and the number of correct predictions.
func (m *Model) Step(p tensor.Named, h []float32, labels []int, classes []int) (float64, int, error) {
	for _, g := range m.Grads {
		clear(g.Data)
	}
	if err := m.Prepare(p); err != nil {
		return 0, 0, err
	}
	B, C, d := len(labels), len(classes), m.D
	logits, err := m.Logits(p, h, B, classes)
	if err != nil {
		return 0, 0, err
	}
	correct := 0
	for k, y := range labels {
		if eval.Argmax(logits[k*C:(k+1)*C]) == y {
			correct++
		}
	}
	m.dlogits = nn.Grow(m.dlogits, B*C)
	loss := clip.CrossEntropy(logits, labels, B, C, m.dlogits)
	m.dhp, m.drows = nn.Grow(m.dhp, B*d), nn.Grow(m.drows, C*d)
	clear(m.dhp)
	clear(m.drows)
	m.head.Backward(m.dhp, m.drows, m.dlogits)
	dwg := m.Grads[ParamClassifier].Data
	for i, c := range classes {
		row := dwg[c*d : (c+1)*d]
		for k, v := range m.drows[i*d : (i+1)*d] {
			row[k] += v
		}
	}
	switch {
	case m.cay != nil:
		err = m.cay.Backward(m.Grads[ParamX].Data, m.dhp)
	case p[ParamLinear] != nil:
		LinearBackward(m.Grads[ParamLinear].Data, m.dhp, h, B, d)
	default:
		k := p[ParamDown].Shape[0]
		m.ad.Backward(m.Grads[ParamDown].Data, m.Grads[ParamUp].Data, m.dhp, h, p[ParamUp].Data, d, k)
	}
	return loss, correct, err
}

// LocalMatrix returns w_1 [d, d] of p (the Cayley transform of X, or
// FedLT's W); nil for FedAdapter.
func (m *Model) LocalMatrix(p tensor.Named) ([]float32, error) {
	switch {
	case m.cay != nil:
		if err := m.Prepare(p); err != nil {
			return nil, err
		}
		w := make([]float32, m.D*m.D)
		return w, m.cay.Matrix(w)
	case p[ParamLinear] != nil:
		return slices.Clone(p[ParamLinear].Data), nil
	}
	return nil, nil
}

// Client is one FedOT site: its parameters P (reference names), optimizer
// and random state.
type Client struct {
	// Whole holds w_g and the local map's parameters P; the server
	// averages those Shared accepts.
	clientbase.Whole
	w *Model
}

// Params implements train.Learner.
func (c *Client) Params() []optim.Param { return clientbase.Params(c.P, c.w.Grads, nil) }

// Step implements train.Learner on cached image features.
func (c *Client) Step(_ context.Context, b train.Batch) (float64, int, error) {
	labels, err := c.Batch(b)
	if err != nil {
		return 0, 0, err
	}
	return c.w.Step(c.P, c.Buf(), labels, c.Env.Task.Spaces[c.Task.TrainSpace].Classes)
}

// Fit installs the shared tensors the server sent, trains locally and
// uploads the shared tensors.
func (c *Client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	return c.FitWith(ctx, ins, c)
}

// Evaluate scores the client's personalised model (its w_g and w_1) on its
// evaluation sets.
func (c *Client) Evaluate(ctx context.Context, _ federation.EvaluateIns) (federation.EvaluateRes, error) {
	if err := c.w.Prepare(c.P); err != nil {
		return federation.EvaluateRes{}, err
	}
	return c.Base.Evaluate(ctx, scorer{c})
}

type scorer struct{ c *Client }

func (s scorer) Logits(space int, img []float32, B int) ([]float32, error) {
	return s.c.w.Logits(s.c.P, img, B, s.c.Env.Task.Spaces[space].Classes)
}

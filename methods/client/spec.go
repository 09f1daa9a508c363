// Package client is the one site client of the trained methods. A method
// supplies a Spec: a Learner per label space (its parameters, gradients,
// training step and scoring), which of its tensors the server aggregates,
// and, through a per-site value that implements small optional interfaces,
// whatever it does differently (what it receives and uploads, extra state,
// a second optimizer). The Client owns the rest: the site's identity, its
// parameters P (reference names) and their state, its training loop
// (optimizer and random generator), its batch buffers, the progress of its
// training, installing received tensors with the "unexpected tensor" check,
// the upload of the shared tensors, and its evaluation.
package client

import (
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// Learner is a method's model for one label space: the one learner
// interface of the methods layer, which a method's learner type implements
// itself (promptfl.Learner, kgcoop.Learner). The training loop does not
// see it: it trains the Client (train.Trainable), which loads the client's
// parameters into its learner and steps it.
type Learner interface {
	// Params and Grads are the live parameters and the gradients of the
	// last Step, by reference name.
	Params() tensor.Named
	Grads() tensor.Named
	// Step computes the loss of a batch of records and overwrites Grads;
	// it returns the loss, its terms and the logits [B, C].
	Step(img []float32, labels []int) (float64, map[string]float64, []float32, error)
	// Prepare computes what scoring needs for the current parameters (the
	// class text features); Logits then scores B records against the
	// space's classes.
	Prepare() error
	Logits(img []float32, B int) ([]float32, error)
}

// Input is what records a method's learners read.
type Input int

const (
	// Features are frozen image features (methods.Features or
	// methods.TokenFeatures): the image encoder is frozen whole.
	Features Input = iota
	// Prefixes are the input of the image encoder's first block (depth 0
	// or 1): methods that prompt the image encoder (MaPLe).
	Prefixes
	// Embeddings are methods.Embeddings records (ln_pre's input and the
	// frozen features of the image and its mirror): FedMVP.
	Embeddings
	// Block is the input of the method's first block ℓ (pFedMMA), which
	// the method checks against env.Start itself.
	Block
)

// Spec is one method as the clients run it.
type Spec struct {
	// Name is the method's registry name (errors, loop names).
	Name string
	// Input is the cache depth the learners read (checked at Build).
	Input Input
	// Placeholder is the number of "X" words before each class name in the
	// class prompts (n_ctx); Words, when set, replaces them (MaPLe's
	// CTX_INIT "a photo of a").
	Placeholder int
	Words       string
	// NoPrompts is set by a method whose learners read no class prompts
	// (adapters on frozen features): NewLearner gets nil tokens.
	NoPrompts bool
	// NewLearner builds the learner of a label space from its class
	// prompts [C, ctx]. The learners are shared by the clients (they train
	// one at a time): a client loads its parameters into a learner before
	// each use. A method whose sites own their learners (Owner) leaves it
	// nil.
	NewLearner func(space int, tokens []int) (Learner, error)
	// Init, when set, gives the initial parameters every client starts
	// from (with env.Init installed); nil: the parameters of the learner of
	// the first client's training space, drawn from the run seed.
	Init func() (tensor.Named, error)
	// StatePrefix is the prefix of the parameters' names in a client's
	// State ("" is "param/"; pFedMMA keeps its "adapter/").
	StatePrefix string
	// Shared selects the tensors the server aggregates (the rest stay on
	// the site).
	Shared federation.Filter
	// Strategy, when set, makes the server side from the initial
	// parameters (nil: FedAvg of the shared tensors).
	Strategy func(init tensor.Named) federation.Strategy
	// Train, when set, replaces the run's local-training settings (the
	// method's own lr, local epochs).
	Train *train.Options
	// Site, when set, makes the method's own part of client c, kept as
	// c.Site: what the method keeps per site beyond P, implementing any of
	// the optional interfaces below to change the client's steps.
	Site func(c *Client) (any, error)
}

// The optional interfaces a Spec's Site value may implement.
type (
	// Receiver installs what the server sent into the client's parameters
	// before training or evaluation (default: Client.ReceiveShared) and
	// readies the learner (a FedProx anchor, downloaded experts).
	Receiver interface {
		Receive(in tensor.Named) error
	}
	// Uploader is what the client sends after training (default: copies of
	// its shared tensors).
	Uploader interface {
		Upload() tensor.Named
	}
	// Preparer readies a learner for scoring the client (default:
	// l.Prepare()).
	Preparer interface {
		Prepare(l Learner) error
	}
	// Trainer selects the parameters the training loop's optimizer updates
	// (default: all of P); an AfterBackward then updates the others.
	Trainer interface {
		Trained(name string) bool
	}
	// BeforeStepper runs before each training batch's learner Step (after
	// the batch's records are loaded): per-batch draws from the batch's
	// generator.
	BeforeStepper interface {
		BeforeStep(b train.Batch) error
	}
	// AfterBackwarder runs after each training batch's learner Step (the
	// gradients computed), before the optimizer's step.
	AfterBackwarder interface {
		AfterBackward(b train.Batch) error
	}
	// ExtraState keeps state beyond P in the client's State (names must
	// not start with "param/", "opt/" or "rng").
	ExtraState interface {
		SaveExtra() (tensor.Named, error)
		LoadExtra(st tensor.Named) error
	}
	// Reporter adds to a Fit's metrics after the local training and the
	// upload (DP-FPL's privacy spent); StartFit runs when the Fit starts,
	// before the client installs what it received.
	Reporter interface {
		StartFit()
		Report(round int, metrics map[string]float64) error
	}
	// Owner is a site that owns its learners (pFedMMA: adapters attached to
	// the shared frozen model) instead of sharing the Spec's per label
	// space; Learner returns the one of a label space.
	Owner interface {
		Learner(space int) (Learner, error)
	}
	// Grouper is a site whose client can be evaluated together with the
	// other clients of its group (federation.GroupEvaluator): EvalGroup
	// returns the group, nil to be evaluated alone.
	Grouper interface {
		EvalGroup() federation.GroupEval
	}
	// Keeper adds to what a site keeps for `pfedmma predict` (its
	// parameters P) what its scoring uses beyond them (pFedMoAP's
	// downloaded experts), so that predict equals evaluation.
	Keeper interface {
		Kept() (tensor.Named, error)
	}
)

// Package federation runs federated training rounds: a server-side Strategy
// decides what each sampled client receives and how uploads are combined, a
// Client trains on what it was sent, and Simulation drives both in one
// process with exact, resumable checkpoints.
//
// The package is model-agnostic in the manner of Flower's Strategy/Client
// split: it sees only named float32 tensors (tensor.Named), their shapes and
// the clients' example counts, never what a tensor means. A method declares
// which names are shared with a Filter; everything else stays on the client.
// Strategies do not know whether they run in simulation or over a network.
//
// Rounds are numbered from 0. Maps are always visited in sorted order, so a
// run is a deterministic function of its seeds.
package federation

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/tensor"
)

// FitIns is what a client receives for one round of local training: the
// tensors its strategy sends and the round's settings.
type FitIns struct {
	Round  int
	Params tensor.Named
	// Config carries per-round settings (strings, as in Flower); methods
	// that need none ignore it.
	Config map[string]string
}

// FitRes is a client's answer to FitIns: the tensors it uploads (shared
// names only), its example count n_i and its training metrics.
type FitRes struct {
	Params      tensor.Named
	NumExamples int
	Metrics     map[string]float64
}

// EvaluateIns asks a client to score its personalised model after a round.
// Params is what the strategy sends the client for its evaluation (see
// EvaluateConfigurer): the round's new global part, which the client
// installs as its Fit would before scoring; empty for methods that evaluate
// what the client already holds.
type EvaluateIns struct {
	Round  int
	Params tensor.Named
	Config map[string]string
}

// EvaluateRes is a client's evaluation: metrics on its own test data.
type EvaluateRes struct {
	Metrics     map[string]float64
	NumExamples int
}

// ClientProxy is the coordinator's handle on one client: in this process
// (LocalProxy) or across a network. Fit and Evaluate block until the client
// answers, fails, or ctx ends.
type ClientProxy interface {
	// ID identifies the client; IDs are unique within a federation.
	ID() int
	// NumExamples is the size of the client's training set (n_i of the
	// aggregation weights) as the client declared it when it joined.
	NumExamples() int
	Fit(ctx context.Context, ins FitIns) (FitRes, error)
	Evaluate(ctx context.Context, ins EvaluateIns) (EvaluateRes, error)
}

// Client is one federated participant as it runs on its site. It owns its
// private data, private parameters, optimizer state and random generator.
// A Client is wrapped by a LocalProxy in simulation, or served by a site
// process over the network.
type Client interface {
	ID() int
	NumExamples() int
	// Fit trains locally in round ins.Round, starting from what the strategy
	// sent, and returns the tensors to upload. It must upload only shared
	// names and should return promptly with ctx.Err() when ctx is cancelled.
	Fit(ctx context.Context, ins FitIns) (FitRes, error)
	// Evaluate scores the client's personalised model on its own test data
	// after installing ins.Params (the new global part, when its strategy
	// sends one) as Fit would. It changes nothing else of the client's
	// state; the installed tensors are what the site then keeps.
	Evaluate(ctx context.Context, ins EvaluateIns) (EvaluateRes, error)
	// State returns everything the client must restore to continue exactly:
	// private and shared local parameters, optimizer state, random state.
	State() (tensor.Named, error)
	// LoadState restores a State.
	LoadState(st tensor.Named) error
}

// ClientInfo is what a strategy knows about a client before any round.
type ClientInfo struct {
	ID          int
	NumExamples int
}

// FitResult is one client's upload after local training, as a strategy
// receives it.
type FitResult struct {
	ClientID    int
	NumExamples int
	Params      tensor.Named
	Metrics     map[string]float64
}

// Failure is a selected client that did not deliver a result in a round:
// its error, timeout or refused upload.
type Failure struct {
	ClientID int
	Err      error
}

// Strategy is the server side of a federated method. It never sees data or
// private tensors, and does not know whether it runs in simulation or over
// a network.
type Strategy interface {
	// Name identifies the strategy; checkpoints record it.
	Name() string
	// Init prepares the strategy for the given clients (sorted by ID). It is
	// called once per run or resume, before LoadState.
	Init(clients []ClientInfo) error
	// Configure returns what each selected client receives in round. A
	// selected client missing from the map receives nothing.
	Configure(round int, selected []int) (map[int]tensor.Named, error)
	// Aggregate combines the uploads of round, given sorted by ClientID;
	// failures lists the selected clients that delivered nothing.
	Aggregate(round int, results []FitResult, failures []Failure) error
	// State returns a deep copy of the server state.
	State() tensor.Named
	// LoadState restores a State (after Init).
	LoadState(st tensor.Named) error
}

// EvaluateConfigurer is a Strategy that sends clients tensors for their
// evaluation after a round (Flower's configure_evaluate): typically the new
// global part, so that every client — selected in the round or not —
// scores [new global; its own private part], in simulation as over the
// network. A Strategy without it sends nothing: each client evaluates what
// it holds.
type EvaluateConfigurer interface {
	// ConfigureEvaluate returns what each client of clients receives for
	// the evaluation after round (called after Aggregate); a client missing
	// from the map receives nothing.
	ConfigureEvaluate(round int, clients []int) (map[int]tensor.Named, error)
}

// RoundReporter is a Strategy that reports metrics of its own after each
// round's aggregation (robust's differential privacy: the ε spent so far);
// the coordinator records them in RoundReport.Strategy.
type RoundReporter interface {
	// RoundMetrics returns the metrics after the latest Aggregate (nil:
	// none).
	RoundMetrics() Metrics
}

// ConfigureEvaluate asks s for its evaluation instructions: nothing when s
// is not an EvaluateConfigurer.
func ConfigureEvaluate(s Strategy, round int, clients []int) (map[int]tensor.Named, error) {
	if ec, ok := s.(EvaluateConfigurer); ok {
		return ec.ConfigureEvaluate(round, clients)
	}
	return nil, nil
}

// Filter selects tensor names. A nil Filter matches every name.
type Filter func(name string) bool

// Match reports whether name is selected.
func (f Filter) Match(name string) bool { return f == nil || f(name) }

// Prefix matches names that start with any of the prefixes.
func Prefix(prefixes ...string) Filter {
	return func(name string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
}

// Contains matches names that contain any of the substrings.
func Contains(subs ...string) Filter {
	return func(name string) bool {
		for _, s := range subs {
			if strings.Contains(name, s) {
				return true
			}
		}
		return false
	}
}

// Names matches exactly the given names.
func Names(names ...string) Filter {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return func(name string) bool { return set[name] }
}

// Metrics are named scalar results (eval.Metrics: NaN and ±Inf survive
// JSON).
type Metrics = eval.Metrics

// PayloadBytes is the size of a message's tensor data (4 bytes per float32;
// names and shapes are not counted).
func PayloadBytes(n tensor.Named) int64 {
	var b int64
	for _, t := range n {
		b += 4 * int64(len(t.Data))
	}
	return b
}

// BytesTensor packs bytes (a marshalled random generator, say) into a tensor,
// one byte per element, so that they survive any float32 store exactly.
func BytesTensor(b []byte) *tensor.Tensor {
	t := tensor.New(len(b))
	for i, c := range b {
		t.Data[i] = float32(c)
	}
	return t
}

// TensorBytes unpacks a BytesTensor.
func TensorBytes(t *tensor.Tensor) ([]byte, error) {
	if t == nil || len(t.Shape) != 1 || t.Shape[0] != len(t.Data) {
		return nil, fmt.Errorf("byte tensor: want a 1-D tensor")
	}
	b := make([]byte, len(t.Data))
	for i, v := range t.Data {
		if v < 0 || v > 255 || v != float32(math.Trunc(float64(v))) {
			return nil, fmt.Errorf("byte tensor: element %d = %v is not a byte", i, v)
		}
		b[i] = byte(v)
	}
	return b, nil
}

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
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/tensor"
)

// Client is one federated participant. It owns its private data, private
// parameters, optimizer state and random generator.
type Client interface {
	// ID identifies the client; IDs are unique within a federation.
	ID() int
	// NumExamples is the size of the client's training set (n_i of the
	// aggregation weights).
	NumExamples() int
	// Fit trains locally in the given round, starting from what the
	// strategy sent (in), and returns the tensors to upload. It must upload
	// only shared names and should return promptly with ctx.Err() when ctx
	// is cancelled.
	Fit(ctx context.Context, round int, in tensor.Named) (out tensor.Named, metrics map[string]float64, err error)
	// Evaluate scores the client's current personalised model on its own
	// test data after the given round.
	Evaluate(ctx context.Context, round int) (map[string]float64, error)
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

// FitResult is one client's upload after local training.
type FitResult struct {
	ClientID    int
	NumExamples int
	Params      tensor.Named
	Metrics     map[string]float64
}

// Strategy is the server side of a federated method.
type Strategy interface {
	// Name identifies the strategy; checkpoints record it.
	Name() string
	// Init prepares the strategy for the given clients (sorted by ID). It is
	// called once per run or resume, before LoadState.
	Init(clients []ClientInfo) error
	// Configure returns what each selected client receives in round. A
	// selected client missing from the map receives nothing.
	Configure(round int, selected []int) (map[int]tensor.Named, error)
	// Aggregate combines the uploads of round, given sorted by ClientID.
	Aggregate(round int, results []FitResult) error
	// State returns a deep copy of the server state.
	State() tensor.Named
	// LoadState restores a State (after Init).
	LoadState(st tensor.Named) error
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

// Metrics are named scalar results. They marshal to JSON with NaN and ±Inf
// written as the strings "NaN", "+Inf" and "-Inf", and every finite value
// round-trips exactly.
type Metrics map[string]float64

// MarshalJSON implements json.Marshaler.
func (m Metrics) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			out[k] = strconv.FormatFloat(v, 'g', -1, 64)
		} else {
			out[k] = v
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON implements json.Unmarshaler.
func (m *Metrics) UnmarshalJSON(b []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*m = nil
		return nil
	}
	out := make(Metrics, len(raw))
	for k, v := range raw {
		switch x := v.(type) {
		case float64:
			out[k] = x
		case string:
			f, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return fmt.Errorf("metric %q: %w", k, err)
			}
			out[k] = f
		default:
			return fmt.Errorf("metric %q: not a number: %v", k, v)
		}
	}
	*m = out
	return nil
}

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

// sortedNames returns the keys of n in order.
func sortedNames(n tensor.Named) []string {
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// withPrefix copies src into dst under prefix+name (deep copies).
func withPrefix(dst tensor.Named, prefix string, src tensor.Named) {
	for k, v := range src {
		dst[prefix+k] = v.Clone()
	}
}

// clientSet records the IDs given to Init.
type clientSet map[int]bool

func newClientSet(clients []ClientInfo) (clientSet, error) {
	s := make(clientSet, len(clients))
	for _, c := range clients {
		if s[c.ID] {
			return nil, fmt.Errorf("client %d listed twice", c.ID)
		}
		if c.NumExamples < 0 {
			return nil, fmt.Errorf("client %d: negative example count %d", c.ID, c.NumExamples)
		}
		s[c.ID] = true
	}
	return s, nil
}

// checkResults verifies that results come from distinct known clients.
func (s clientSet) checkResults(results []FitResult) error {
	seen := make(map[int]bool, len(results))
	for _, r := range results {
		if !s[r.ClientID] {
			return fmt.Errorf("result from unknown client %d", r.ClientID)
		}
		if seen[r.ClientID] {
			return fmt.Errorf("two results from client %d", r.ClientID)
		}
		seen[r.ClientID] = true
	}
	return nil
}

// mean averages the tensors named by match over results, in results order,
// accumulating in float64 and rounding once to float32. Weights are
// n_i / Σ n_k over the results, or 1/len(results) when uniform. Every result
// must carry the same matching names with the same shapes.
func mean(results []FitResult, match func(string) bool, uniform bool) (tensor.Named, error) {
	if len(results) == 0 {
		return nil, fmt.Errorf("no results to average")
	}
	w := make([]float64, len(results))
	var total float64
	for _, r := range results {
		total += float64(r.NumExamples)
	}
	for i, r := range results {
		switch {
		case uniform:
			w[i] = 1 / float64(len(results))
		case total <= 0:
			return nil, fmt.Errorf("weighted average over clients with %v examples in all", total)
		default:
			w[i] = float64(r.NumExamples) / total
		}
	}
	var names []string
	for _, k := range sortedNames(results[0].Params) {
		if match(k) {
			names = append(names, k)
		}
	}
	out := make(tensor.Named, len(names))
	for _, name := range names {
		ref := results[0].Params[name]
		acc := make([]float64, len(ref.Data))
		for i, r := range results {
			t, ok := r.Params[name]
			if !ok {
				return nil, fmt.Errorf("client %d did not upload %q (client %d did)", r.ClientID, name, results[0].ClientID)
			}
			if !tensor.SameShape(t.Shape, ref.Shape) || len(t.Data) != len(ref.Data) {
				return nil, fmt.Errorf("client %d uploaded %q with shape %v, client %d with %v", r.ClientID, name, t.Shape, results[0].ClientID, ref.Shape)
			}
			for j, v := range t.Data {
				acc[j] += w[i] * float64(v)
			}
		}
		avg := tensor.New(ref.Shape...)
		for j, v := range acc {
			avg.Data[j] = float32(v)
		}
		out[name] = avg
	}
	for _, r := range results[1:] {
		for k := range r.Params {
			if match(k) {
				if _, ok := out[k]; !ok {
					return nil, fmt.Errorf("client %d uploaded %q, client %d did not", r.ClientID, k, results[0].ClientID)
				}
			}
		}
	}
	return out, nil
}

// checkUploads rejects any uploaded name the strategy does not share: a
// private tensor must never leave its client.
func checkUploads(results []FitResult, allowed func(string) bool) error {
	for _, r := range results {
		for _, k := range sortedNames(r.Params) {
			if !allowed(k) {
				return fmt.Errorf("client %d uploaded %q, which is not a shared tensor", r.ClientID, k)
			}
		}
	}
	return nil
}

// splitIndexed parses "<prefix><int>/<rest>".
func splitIndexed(key, prefix string) (int, string, error) {
	rest := strings.TrimPrefix(key, prefix)
	idStr, name, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		return 0, "", fmt.Errorf("entry %q: want %s<id>/<name>", key, prefix)
	}
	id, err := strconv.Atoi(idStr)
	if err != nil {
		return 0, "", fmt.Errorf("entry %q: bad id: %w", key, err)
	}
	return id, name, nil
}

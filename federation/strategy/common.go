// Package strategy holds the server sides of the federated methods: FedAvg
// (weighted or uniform), Relay (averaged plus relayed tensors) and KNNPool
// (pFedMoAP's prompt pool). Each implements federation.Strategy and sees only
// named tensors, their shapes and the clients' example counts.
package strategy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
)

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

func newClientSet(clients []federation.ClientInfo) (clientSet, error) {
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
func (s clientSet) checkResults(results []federation.FitResult) error {
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
func mean(results []federation.FitResult, match func(string) bool, uniform bool) (tensor.Named, error) {
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
func checkUploads(results []federation.FitResult, allowed func(string) bool) error {
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

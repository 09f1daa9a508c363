package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
)

// FewShotIndices draws shots items per class (all of a class's items when
// it has fewer; every item when shots <= 0), seeded. Classes are visited in
// label order; the returned indices are ascending, so the draw keeps the
// input order.
func FewShotIndices(items []dataset.Item, shots int, seed uint64) []int {
	if shots <= 0 {
		return iota0(len(items))
	}
	labels, groups := byLabel(labelsOf(items), iota0(len(items)))
	rng := newRand(seed, streamFewShot)
	keep := make([]bool, len(items))
	for _, l := range labels {
		g := groups[l]
		if len(g) > shots {
			// Partial Fisher–Yates: the first shots entries are a uniform sample.
			for i := range shots {
				j := i + rng.IntN(len(g)-i)
				g[i], g[j] = g[j], g[i]
			}
			g = g[:shots]
		}
		for _, i := range g {
			keep[i] = true
		}
	}
	var out []int
	for i, k := range keep {
		if k {
			out = append(out, i)
		}
	}
	return out
}

// FewShot returns the items chosen by [FewShotIndices], in input order.
func FewShot(items []dataset.Item, shots int, seed uint64) []dataset.Item {
	idx := FewShotIndices(items, shots, seed)
	out := make([]dataset.Item, len(idx))
	for k, i := range idx {
		out[k] = items[i]
	}
	return out
}

// FewShotDraw is a saved few-shot draw: the keys of the chosen items.
// pfedmma caches draws in this JSON form, not CoOp's pickles.
type FewShotDraw struct {
	Dataset string   `json:"dataset"`
	Shots   int      `json:"shots"`
	Seed    uint64   `json:"seed"`
	Keys    []string `json:"keys"`
}

// NewFewShotDraw draws with [FewShot] and records the chosen keys.
func NewFewShotDraw(name string, items []dataset.Item, shots int, seed uint64) FewShotDraw {
	d := FewShotDraw{Dataset: name, Shots: shots, Seed: seed}
	for _, it := range FewShot(items, shots, seed) {
		d.Keys = append(d.Keys, it.Key)
	}
	return d
}

// Apply returns the items whose keys the draw lists, in input order. A key
// absent from items means the dataset changed since the draw: an error.
func (d FewShotDraw) Apply(items []dataset.Item) ([]dataset.Item, error) {
	want := make(map[string]bool, len(d.Keys))
	for _, k := range d.Keys {
		want[k] = true
	}
	var out []dataset.Item
	for _, it := range items {
		if want[it.Key] {
			out = append(out, it)
			delete(want, it.Key)
		}
	}
	if len(want) > 0 {
		for _, k := range d.Keys {
			if want[k] {
				return nil, fmt.Errorf("few-shot draw %s shots=%d seed=%d: key %q not in the dataset (%d keys missing)", d.Dataset, d.Shots, d.Seed, k, len(want))
			}
		}
	}
	return out, nil
}

// SaveFewShot writes d as JSON to path, through a temporary file.
func SaveFewShot(path string, d FewShotDraw) error {
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return fmt.Errorf("few-shot cache %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("few-shot cache %s: %w", path, err)
	}
	if err := atomicfile.WriteBytes(path, append(b, '\n')); err != nil {
		return fmt.Errorf("few-shot cache %s: %w", path, err)
	}
	return nil
}

// LoadFewShot reads a draw written by [SaveFewShot].
func LoadFewShot(path string) (FewShotDraw, error) {
	var d FewShotDraw
	b, err := os.ReadFile(path)
	if err != nil {
		return d, fmt.Errorf("few-shot cache %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("few-shot cache %s: %w", path, err)
	}
	if d.Keys == nil {
		return d, fmt.Errorf("few-shot cache %s: field \"keys\": missing", path)
	}
	return d, nil
}

// FewShotPath is where [CachedFewShot] keeps a draw:
// dir/split_fewshot/shot_{shots}-seed_{seed}.json (CoOp's folder, pfedmma's
// own format).
func FewShotPath(dir string, shots int, seed uint64) string {
	return filepath.Join(dir, "split_fewshot", fmt.Sprintf("shot_%d-seed_%d.json", shots, seed))
}

// CachedFewShot returns the few-shot draw cached at [FewShotPath] when it
// exists and matches (name, shots, seed), and otherwise draws with
// [FewShot] and saves the draw there. An empty dir disables the cache.
func CachedFewShot(dir, name string, items []dataset.Item, shots int, seed uint64) ([]dataset.Item, error) {
	if dir == "" {
		return FewShot(items, shots, seed), nil
	}
	p := FewShotPath(dir, shots, seed)
	d, err := LoadFewShot(p)
	switch {
	case err == nil && d.Dataset == name && d.Shots == shots && d.Seed == seed:
		return d.Apply(items)
	case err == nil:
		return nil, fmt.Errorf("few-shot cache %s: holds %s shots=%d seed=%d, want %s shots=%d seed=%d", p, d.Dataset, d.Shots, d.Seed, name, shots, seed)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	d = NewFewShotDraw(name, items, shots, seed)
	if err := SaveFewShot(p, d); err != nil {
		return nil, err
	}
	return d.Apply(items)
}

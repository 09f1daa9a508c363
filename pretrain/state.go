package pretrain

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// StateFile is the name of the resumable training state in the output
// folder: every parameter, both optimizers' moments, the step and the
// options, in one safetensors file replaced atomically.
const StateFile = "pretrain-state.safetensors"

// Metadata keys of the state file.
const (
	metaStep    = "pfedmma.pretrain.step"
	metaOptions = "pfedmma.pretrain.options"
	metaWall    = "pfedmma.pretrain.wall_seconds"
	metaHistory = "pfedmma.pretrain.history"
)

// Point is one logged training step.
type Point struct {
	Step     int     `json:"step"`
	Loss     float64 `json:"loss"`
	BatchAcc float64 `json:"batch_acc"`
	LR       float64 `json:"lr"`
	Scale    float64 `json:"logit_scale"`
}

// saveState writes the trainer's state to path.
func (t *trainer) saveState(path string, wall float64, history []Point) error {
	named := tensor.Named{}
	for _, p := range t.params.all() {
		named["model/"+p.Name] = &tensor.Tensor{Shape: []int{len(p.Value)}, Data: p.Value}
	}
	for prefix, o := range map[string]*optim.AdamW{"opt.decay/": t.decay, "opt.nodecay/": t.noDecay} {
		for k, v := range o.State() {
			named[prefix+k] = v
		}
	}
	opts, err := json.Marshal(t.opts)
	if err != nil {
		return fmt.Errorf("pretrain: state %s: options: %w", path, err)
	}
	hist, err := json.Marshal(history)
	if err != nil {
		return fmt.Errorf("pretrain: state %s: history: %w", path, err)
	}
	meta := map[string]string{
		metaStep:    strconv.Itoa(t.step),
		metaOptions: string(opts),
		metaWall:    strconv.FormatFloat(wall, 'g', -1, 64),
		metaHistory: string(hist),
	}
	if err := safetensors.Write(path, named, nil, meta); err != nil {
		return fmt.Errorf("pretrain: state: %w", err)
	}
	return nil
}

// loadState restores the trainer from path, which must have been written
// with the same result-relevant options. It returns the wall time and
// history recorded so far.
func (t *trainer) loadState(path string) (wall float64, history []Point, err error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("pretrain: state: %w", err)
	}
	defer f.Close()
	meta := f.Metadata()
	want, err := json.Marshal(t.opts)
	if err != nil {
		return 0, nil, fmt.Errorf("pretrain: state %s: options: %w", path, err)
	}
	if meta[metaOptions] != string(want) {
		return 0, nil, fmt.Errorf("pretrain: state %s: written with other options %s, want %s: %w", path, meta[metaOptions], want, ErrOptions)
	}
	step, err := strconv.Atoi(meta[metaStep])
	if err != nil || step < 0 {
		return 0, nil, fmt.Errorf("pretrain: state %s: metadata %q = %q: not a step count", path, metaStep, meta[metaStep])
	}
	if wall, err = strconv.ParseFloat(meta[metaWall], 64); err != nil {
		return 0, nil, fmt.Errorf("pretrain: state %s: metadata %q: %w", path, metaWall, err)
	}
	if err := json.Unmarshal([]byte(meta[metaHistory]), &history); err != nil {
		return 0, nil, fmt.Errorf("pretrain: state %s: metadata %q: %w", path, metaHistory, err)
	}
	all, err := f.Float32All()
	if err != nil {
		return 0, nil, fmt.Errorf("pretrain: state: %w", err)
	}
	for _, p := range t.params.all() {
		name := "model/" + p.Name
		v, ok := all[name]
		if !ok {
			return 0, nil, fmt.Errorf("pretrain: state %s: tensor %q missing", path, name)
		}
		if len(v.Data) != len(p.Value) {
			return 0, nil, fmt.Errorf("pretrain: state %s: tensor %q has %d values, want %d", path, name, len(v.Data), len(p.Value))
		}
		copy(p.Value, v.Data)
	}
	for prefix, o := range map[string]*optim.AdamW{"opt.decay/": t.decay, "opt.nodecay/": t.noDecay} {
		st := tensor.Named{}
		for k, v := range all {
			if rest, ok := strings.CutPrefix(k, prefix); ok {
				st[rest] = v
			}
		}
		if err := o.LoadState(st); err != nil {
			return 0, nil, fmt.Errorf("pretrain: state %s: %w", path, err)
		}
	}
	t.step = step
	t.m.W.LogitScale = t.ls[0]
	return wall, history, nil
}

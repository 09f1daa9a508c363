package methods

import (
	"fmt"

	"github.com/pfedmma/pfedmma/actcache"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
)

// TensorClient is one client's training data given as tensors: normalised
// pixels [N, 3, S, S] and labels in the class order of the prompts.
type TensorClient struct {
	Pixels []float32
	Labels []int
}

// TensorEnv builds an Env over data held in memory, as the reference
// fixtures and `pfedmma step`/`round` give it: one label space whose class
// prompts are the token rows tokens [C, ctx], clients with the given
// images, and frozen prefixes of depth start computed here. The clients
// have no evaluation sets.
func TensorEnv(m *clip.Model, start int, tokens []int, C int, clients []TensorClient, opts train.Options, seed uint64) (*Env, error) {
	ctx := m.W.Config.Text.ContextLength
	if len(tokens) != C*ctx {
		return nil, fmt.Errorf("tokens: %d ids for %d classes of %d tokens", len(tokens), C, ctx)
	}
	S := m.W.Config.Vision.ImageSize
	per := 3 * S * S
	classes := make([]int, C)
	names := make([]string, C)
	for c := range classes {
		classes[c], names[c] = c, fmt.Sprintf("class%d", c)
	}
	task := &protocol.Task{Protocol: "tensors", Dataset: &dataset.Dataset{Name: "tensors", Classes: names},
		Spaces: []protocol.Space{{Name: "all", Classes: classes}}}
	px := &Prefixer{Model: m, Start: start, Batch: 32}
	store, err := actcache.New(actcache.Options{RecordLen: px.RecordLen(), MemoryBudget: 1 << 40})
	if err != nil {
		return nil, err
	}
	env := &Env{Model: m, Task: task, Start: start, Seed: seed, Train: opts, Prefixer: px,
		TrainStore: store, TestStore: store, TrainRecs: map[int][]int{}, TestRecs: map[int]int{},
		Evaluator:      &eval.Evaluator{Source: store, RecordLen: px.RecordLen(), Batch: 32},
		SpaceTokenRows: map[int][]int{0: tokens}}
	n := px.RecordLen()
	for id, c := range clients {
		N := len(c.Labels)
		if len(c.Pixels) != N*per {
			store.Close()
			return nil, fmt.Errorf("client %d: %d pixel values for %d images of %d×%d", id, len(c.Pixels), N, S, S)
		}
		ct := protocol.ClientTask{ID: id, TrainSpace: 0}
		prefix := ImageRecords(m, start, c.Pixels, N, nil)
		for k := 0; k < N; k++ {
			if c.Labels[k] < 0 || c.Labels[k] >= C {
				store.Close()
				return nil, fmt.Errorf("client %d: label %d of image %d outside 0..%d", id, c.Labels[k], k, C-1)
			}
			item := len(task.Train)
			task.Train = append(task.Train, dataset.Item{Key: fmt.Sprintf("client%d/%d", id, k), Label: c.Labels[k]})
			rec, err := store.Put(task.Train[item].Key, prefix[k*n:(k+1)*n])
			if err != nil {
				store.Close()
				return nil, err
			}
			env.TrainRecs[item] = []int{rec}
			ct.Train = append(ct.Train, item)
			ct.Labels = append(ct.Labels, c.Labels[k])
		}
		task.Clients = append(task.Clients, ct)
	}
	return env, nil
}

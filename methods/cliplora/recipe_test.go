package cliplora

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
)

// TestOwnOptimizer: clip_lora.optimizer, lr, weight_decay and local_epochs
// replace the run's for CLIP-LoRA's clients; unset, the clients train with
// the run's settings; bad values are refused naming the key.
func TestOwnOptimizer(t *testing.T) {
	run := train.Options{Epochs: 3, Batch: 2, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4}
	env, err := parity.TensorEnv(tinyModel(4), 1, rows(3), 3, []parity.TensorClient{{Pixels: make([]float32, 2*3*8*8), Labels: []int{0, 1}}}, run, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	for _, tc := range []struct {
		own  func(*Settings)
		want train.Options
	}{
		{func(*Settings) {}, run},
		{func(s *Settings) { s.Optimizer, s.LR, s.WeightDecay, s.LocalEpochs = "adamw", 2e-4, 0.01, 1 },
			train.Options{Epochs: 1, Batch: 2, Optimizer: "adamw", LR: 2e-4, Momentum: 0.9, WD: 0.01}},
	} {
		sec := Method{}.DefaultConfig().(*Settings)
		tc.own(sec)
		plan, err := Method{}.Build(env, sec)
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.Clients[0].(*client.Client).TrainOptions(); got != tc.want {
			t.Fatalf("section %+v: clients train with %+v, want %+v", sec, got, tc.want)
		}
	}
	for key, bad := range map[string]func(*Settings){
		"optimizer":    func(s *Settings) { s.Optimizer = "adam" },
		"lr":           func(s *Settings) { s.LR = -1 },
		"weight_decay": func(s *Settings) { s.WeightDecay = -1 },
		"local_epochs": func(s *Settings) { s.LocalEpochs = -1 },
	} {
		sec := Method{}.DefaultConfig().(*Settings)
		bad(sec)
		if err := config.CheckSection("clip_lora", sec); err == nil || !strings.Contains(err.Error(), "clip_lora."+key) {
			t.Errorf("bad %s: error %v, want one naming clip_lora.%s", key, err, key)
		}
	}
}

package fedotp

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
)

// TestOwnLR: fedotp.lr and fedotp.local_epochs replace the run's for
// FedOTP's clients; unset, the clients train with the run's settings; bad
// values are refused naming the key.
func TestOwnLR(t *testing.T) {
	cfg := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 30, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	tokens := make([]int, 2*8)
	for c := range 2 {
		copy(tokens[c*8:], []int{28, 3, 3, 10 + c, 29})
	}
	run := train.Options{Epochs: 3, Batch: 2, Optimizer: "sgd", LR: 0.05, Momentum: 0.9}
	env, err := parity.TensorEnv(clip.New(clip.Random(cfg, 1)), methods.TokenFeatures, tokens, 2,
		[]parity.TensorClient{{Pixels: make([]float32, 2*3*8*8), Labels: []int{0, 1}}}, run, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	own := run
	own.LR, own.Epochs = 0.002, 1
	for _, tc := range []struct {
		lr     float64
		epochs int
		want   train.Options
	}{{0, 0, run}, {0.002, 1, own}} {
		sec := Method{}.DefaultConfig().(*Settings)
		sec.NCtx, sec.LR, sec.LocalEpochs = 2, tc.lr, tc.epochs
		plan, err := Method{}.Build(env, sec)
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.Clients[0].(*client.Client).TrainOptions(); got != tc.want {
			t.Fatalf("lr %v, local_epochs %d: clients train with %+v, want %+v", tc.lr, tc.epochs, got, tc.want)
		}
	}
	for key, bad := range map[string]func(*Settings){
		"lr":           func(s *Settings) { s.LR = -1 },
		"local_epochs": func(s *Settings) { s.LocalEpochs = -1 },
	} {
		sec := Method{}.DefaultConfig().(*Settings)
		bad(sec)
		if err := config.CheckSection("fedotp", sec); err == nil || !strings.Contains(err.Error(), "fedotp."+key) {
			t.Errorf("bad %s: error %v, want one naming fedotp.%s", key, err, key)
		}
	}
}

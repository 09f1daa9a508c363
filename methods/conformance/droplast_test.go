package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/protocol"
)

// authorsDropLast is what each method's authors' training loader does with
// an epoch's partial last batch, read from their code (true: dropped when
// the client holds at least one full batch). It is the oracle of
// TestDropLastAsTheAuthors, written here apart from the methods' own
// declarations (methods.Info.Loader), which must agree with it.
var authorsDropLast = map[string]bool{
	// Dassl's build_data_loader: drop_last = is_train and len(data_source) >= batch_size
	"pfedmma":      true, // sajjad-ucsb/pFedMMA Dassl/dassl/data/data_manager.py, fed_train_loader_x
	"promptfl":     true, // sajjad-ucsb/pFedMMA trainers/promptfl.py on the same loaders
	"fedpgp":       true, // sajjad-ucsb/pFedMMA trainers/fedpgp.py on the same loaders
	"fedotp":       true, // HongxiaLee/FedOTP Dassl/dassl/data/data_manager.py
	"pfedmoap":     true, // ljaiverson/pFedMoAP Dassl/dassl/data/data_manager.py
	"promptfolio":  true, // PanBikang/PromptFolio Dassl/dassl/data/data_manager.py
	"dpfpl":        true, // linhhtran/DP-FPL Dassl/dassl/data/data_manager.py
	"cocoop":       true, // KaiyangZhou/CoOp: a Dassl TrainerX (Dassl.pytorch)
	"kgcoop":       true, // htyao89/KgCoOp Dassl.ProGrad.pytorch/dassl/data/data_manager.py
	"maple":        true, // muzairkhattak/multimodal-prompt-learning: a Dassl TrainerX
	"clip_adapter": true, // gaopengcuhk/CLIP-Adapter clip_adapter.py: a Dassl TrainerX
	"prograd":      true, // BeierZhu/Prompt-align Dassl.ProGrad.pytorch/dassl/data/data_manager.py
	"plot":         true, // CHENGY12/PLOT plot-coop: a Dassl TrainerX (Dassl.pytorch)
	"promptsrc":    true, // muzairkhattak/PromptSRC: a Dassl TrainerX (Dassl.pytorch)
	// PyTorch's DataLoader, drop_last=False
	"clip_lora": false, // MaxZanella/CLIP-LoRA datasets/utils.py: drop_last=False
	"fedtpg":    false, // boschresearch/FedTPG dataloader/dm_federated.py: no drop_last
	"fedmvp":    false, // mainaksingha01/FedMVP dataloader/dm_federated.py: no drop_last
	"fedclip":   false, // Yuqin-G/PMFLT dataloader/dm_federated.py: no drop_last
	"fedpha":    false, // Yuqin-G/PMFLT dataloader/dm_federated.py: no drop_last
	// no authors' code: PyTorch's default, every example trains
	"fedot": false,
	"adapt": false,
}

// batchLog records the sizes of the training batches each client of a run
// loads, in order.
type batchLog struct {
	mu    sync.Mutex
	sizes map[int][]int // client id → batch sizes
	n     map[int]int   // client id → training examples
}

func (l *batchLog) record(_ string, c *protocol.ClientTask, batch []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sizes[c.ID] = append(l.sizes[c.ID], len(batch))
	l.n[c.ID] = len(c.Train)
}

// dropped runs method name for one round on the tiny world with sets and
// reports whether its epochs dropped the partial last batch: false when a
// client that holds a full batch and a remainder trained on the remainder,
// true when such clients did not; an error when no client of the run holds
// a partial last batch (the run cannot tell).
func dropped(t *testing.T, name string, sets ...string) (bool, error) {
	t.Helper()
	e := worldConfig(t, name, append([]string{"federation.rounds=1", "federation.fraction=1", "dataset.shots=3", "batch_size=2"}, sets...)...)
	o := options(t, e, t.TempDir())
	log := &batchLog{sizes: map[int][]int{}, n: map[int]int{}}
	o.OnTrainBatch = log.record
	if _, err := experiment.Run(context.Background(), o); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	kept, drops := 0, 0
	for id, sizes := range log.sizes {
		full := slices.Max(sizes) // every batch but a partial last one is full
		if full >= log.n[id] || log.n[id]%full == 0 {
			continue // one batch holds the client, or whole batches do
		}
		if slices.Contains(sizes, log.n[id]%full) {
			kept++
		} else {
			drops++
		}
	}
	switch {
	case kept > 0 && drops > 0:
		return false, fmt.Errorf("some clients kept the partial last batch, others dropped it: %v (examples %v)", log.sizes, log.n)
	case kept+drops == 0:
		return false, fmt.Errorf("no client holds a partial last batch: batches %v, examples %v", log.sizes, log.n)
	}
	return drops > 0, nil
}

// TestDropLastAsTheAuthors: train.drop_last auto (the default) drops an
// epoch's partial last batch in exactly the methods whose authors' loader
// drops it (authorsDropLast, from their code), observed on the batches the
// production clients load in a run; true and false force it either way.
// Which batches a client loads does not depend on the GEMM, so make test's
// pure-Go pass skips it (skipPureGo): there its runs took 776.6 s, three
// times TestPredictEqualsEvaluation's 256.3 s (docs/suite/purego/before.json,
// on the shared machine under load).
func TestDropLastAsTheAuthors(t *testing.T) {
	skipPureGo(t)
	for _, m := range trainable(t) {
		name := m.Info().Name
		want, ok := authorsDropLast[name]
		if !ok {
			t.Errorf("%s: not in authorsDropLast: read what its authors' training loader does with a partial last batch and add it", name)
			continue
		}
		if got := m.Info().Loader.DropsLast(); got != want {
			t.Errorf("%s: methods.Info.Loader %q drops the partial last batch: %v, its authors' code: %v", name, m.Info().Loader, got, want)
		}
		t.Run(name, func(t *testing.T) {
			got, err := dropped(t, name)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("train.drop_last auto: %s dropped the partial last batch: %v, its authors: %v", name, got, want)
			}
		})
	}
	for _, c := range []struct {
		name, set string
		want      bool
	}{
		{"pfedmma", "train.drop_last=false", false}, // Dassl's, forced to keep it
		{"clip_lora", "train.drop_last=true", true}, // PyTorch's default, forced to drop it
	} {
		got, err := dropped(t, c.name, c.set)
		if err != nil {
			t.Fatalf("%s %s: %v", c.name, c.set, err)
		}
		if got != c.want {
			t.Errorf("%s with %s dropped the partial last batch: %v, want %v", c.name, c.set, got, c.want)
		}
	}
}

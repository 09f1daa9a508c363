package adapt

import (
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/world"
)

// TestUnseenStyleAtLeastZeroShot is the federated domain-generalisation
// guard on the generated world with the shipped tiny CLIP: one client per
// rendering style trains on three styles, and the global model (averaged
// visual prompts, the three relayed text prompts mixed by the domain
// weights) is scored on the test images of the fourth, unseen style. It must
// not fall below zero-shot CLIP ("a photo of a {class}.") on that style.
func TestUnseenStyleAtLeastZeroShot(t *testing.T) {
	start := time.Now()
	styles := []string{"photo", "clipart", "sketch", "painting"}
	const heldOut = 3 // painting
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	S := m.W.Config.Vision.ImageSize
	ds, err := world.Load("", dataset.Options{Seed: 1, Domains: styles, NumClasses: 40,
		TrainPerClass: 16, TestPerClass: 8, ImageSize: S})
	if err != nil {
		t.Fatal(err)
	}
	tf := preprocess.CLIPTransform(S)
	pixels := func(items []dataset.Item, dom int) ([]float32, []int) {
		var px []float32
		var labels []int
		for _, it := range items {
			if it.Domain != dom {
				continue
			}
			img, err := it.Source.Load()
			if err != nil {
				t.Fatal(err)
			}
			px = append(px, tf.Eval(img)...)
			labels = append(labels, it.Label)
		}
		return px, labels
	}
	C := len(ds.Classes)
	ctx := m.W.Config.Text.ContextLength
	s := DefaultSettings()
	s.LR = 5e-3 // a few epochs instead of the paper's 200 rounds
	var adaptTokens, zsTokens []int
	for _, c := range ds.Classes {
		name := strings.ReplaceAll(c, "_", " ")
		ids, err := tok.Tokenize(client.Placeholder(s.NCtx)+" "+name+".", ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		adaptTokens = append(adaptTokens, ids...)
		if ids, err = tok.Tokenize("a photo of a "+name+".", ctx, false); err != nil {
			t.Fatal(err)
		}
		zsTokens = append(zsTokens, ids...)
	}

	var clients []parity.TensorClient
	var doms []int
	for d := range styles {
		if d == heldOut {
			continue
		}
		px, labels := pixels(ds.Train, d)
		clients = append(clients, parity.TensorClient{Pixels: px, Labels: labels})
		doms = append(doms, d)
	}
	env, err := parity.TensorEnv(m, 1, adaptTokens, C, clients, train.Options{Epochs: 2, Batch: 32}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	for i, d := range doms {
		env.Task.Clients[i].Domain = d
	}
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	var infos []federation.ClientInfo
	for _, c := range plan.Clients {
		infos = append(infos, federation.ClientInfo{ID: c.ID(), NumExamples: c.NumExamples()})
	}
	if err := plan.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	for r := 0; r < rounds; r++ {
		round(t, plan, r)
	}

	// Score the unseen style.
	px, labels := pixels(ds.Test, heldOut)
	B := len(labels)
	E := m.W.Config.EmbedDim
	txt, err := m.EncodeText(zsTokens, C)
	if err != nil {
		t.Fatal(err)
	}
	txt = append([]float32(nil), txt...)
	zs := accuracy(clip.Logits(m.EncodeImage(px, B), txt, B, C, E, m.W.LogitScale), labels, C)

	l, err := NewLearner(m, adaptTokens, s.config(len(doms), 0))
	if err != nil {
		t.Fatal(err)
	}
	P := plan.Global()
	if _, err := l.TextFeatures(P); err != nil {
		t.Fatal(err)
	}
	x0 := clip.ImagePrefix(m, 1, px, B, nil)
	lg, wts, err := l.Logits(P, x0, B)
	if err != nil {
		t.Fatal(err)
	}
	ad := accuracy(lg, labels, C)
	var mean [3]float64
	for b := 0; b < B; b++ {
		for i := range mean {
			mean[i] += float64(wts[b*3+i]) / float64(B)
		}
	}
	t.Logf("unseen style %s (%d test images): zero-shot %.2f%%, ADAPT %.2f%% after %d rounds on %v; mean domain weights %.3f; %.1fs",
		styles[heldOut], B, zs, ad, rounds, styles[:heldOut], mean, time.Since(start).Seconds())
	if ad < zs {
		t.Errorf("ADAPT %.2f%% on the unseen style %s is below zero-shot %.2f%%", ad, styles[heldOut], zs)
	}
}

func accuracy(logits []float32, labels []int, C int) float64 {
	ok := 0
	for b, y := range labels {
		if eval.Argmax(logits[b*C:(b+1)*C]) == y {
			ok++
		}
	}
	return 100 * float64(ok) / float64(len(labels))
}

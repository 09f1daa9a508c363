package pretrain

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// microOptions is a model small enough for unit tests.
func microOptions(t *testing.T) Options {
	o := DefaultOptions()
	o.ImageSize, o.PatchSize = 16, 8
	o.VisionWidth, o.VisionLayers, o.VisionHeads = 16, 1, 2
	o.TextWidth, o.TextLayers, o.TextHeads = 16, 1, 2
	o.ContextLength, o.EmbedDim = 16, 16
	o.VocabCaptions = 500
	o.Steps, o.Batch, o.Warmup = 6, 16, 2
	o.LR, o.MinLR = 3e-3, 1e-4
	o.EvalPerClass = 0
	o.FashionFraction = 0
	o.OutDir = t.TempDir()
	o.CheckpointEvery = 0
	return o
}

// newTestRun builds a trainer and a sampler for opts.
func newTestRun(t *testing.T, opts Options) (*trainer, *sampler) {
	t.Helper()
	w, err := world.New(opts.WorldConfig())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := learnVocab(w, opts.VocabCaptions, opts.Merges)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(opts, clip.Random(opts.ModelConfig(tok.VocabSize()), opts.Seed))
	s := &sampler{w: w, tok: tok, seed: opts.Seed, B: opts.Batch, S: opts.ImageSize, C: opts.ContextLength, lut: newPixelLUT()}
	return tr, s
}

func TestInfoNCEGradient(t *testing.T) {
	for _, tc := range []struct {
		name  string
		B, E  int
		scale float32
	}{{"B4", 4, 6, 1.5}, {"B7-hot", 7, 5, 3}, {"B2", 2, 3, 0.2}} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(tc.B)))
			img := gradcheck.Rand(rng, tc.B*tc.E, 1)
			txt := gradcheck.Rand(rng, tc.B*tc.E, 1)
			ls := []float32{tc.scale}
			dImg, dTxt := make([]float32, len(img)), make([]float32, len(txt))
			loss := func() float64 {
				l, _, _ := InfoNCE(img, txt, tc.B, tc.E, ls[0], make([]float32, len(img)), make([]float32, len(txt)))
				return l
			}
			_, dScale, _ := InfoNCE(img, txt, tc.B, tc.E, ls[0], dImg, dTxt)
			for _, p := range []struct {
				name    string
				v, grad []float32
			}{{"img", img, dImg}, {"txt", txt, dTxt}, {"logit_scale", ls, []float32{float32(dScale)}}} {
				if err := gradcheck.Check(p.name, p.v, p.grad, loss, 1e-3, 1e-2, 40, rng); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestInfoNCEValues(t *testing.T) {
	const B, E = 5, 5
	// one-hot features: text j matches image j exactly.
	img := make([]float32, B*E)
	for i := range B {
		img[i*E+i] = 2
	}
	d1, d2 := make([]float32, B*E), make([]float32, B*E)
	for _, tc := range []struct {
		name     string
		scale    float32
		txt      []float32
		wantLoss float64
		correct  int
	}{
		// cos = I: each row is softmax(s·e_i), loss = log(1 + (B−1)e^{−s}).
		{"aligned", float32(math.Log(10)), img, math.Log(1 + 4*math.Exp(-10)), B},
		// identical images and texts: every logit equal, loss = log B, and
		// only row 0 has its match at the (first) argmax.
		{"uninformative", 1, bytes2(B, E), math.Log(B), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := img
			if tc.name == "uninformative" {
				img = bytes2(B, E)
			}
			loss, _, correct := InfoNCE(img, tc.txt, B, E, tc.scale, d1, d2)
			if math.Abs(loss-tc.wantLoss) > 1e-5 {
				t.Errorf("loss %v, want %v", loss, tc.wantLoss)
			}
			if correct != tc.correct {
				t.Errorf("correct %d, want %d", correct, tc.correct)
			}
		})
	}
}

// bytes2 returns B identical rows of width E.
func bytes2(B, E int) []float32 {
	out := make([]float32, B*E)
	for i := range B {
		for k := range E {
			out[i*E+k] = float32(k + 1)
		}
	}
	return out
}

func TestTrainingReducesLoss(t *testing.T) {
	opts := microOptions(t)
	opts.Steps, opts.Warmup = 40, 4
	tr, s := newTestRun(t, opts)
	var losses []float64
	for step := range opts.Steps {
		b := s.make(step, 2)
		if b.err != nil {
			t.Fatal(b.err)
		}
		r, err := tr.trainStep(b)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, r.loss)
	}
	mean := func(xs []float64) float64 {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	first, last := mean(losses[:8]), mean(losses[len(losses)-8:])
	t.Logf("loss %.3f → %.3f (log B = %.3f)", first, last, math.Log(float64(opts.Batch)))
	if !(last < first-0.2) {
		t.Fatalf("mean loss of the last 8 steps %.3f, want at least 0.2 below the first 8 (%.3f)", last, first)
	}
}

// TestResumeIdentical checks that saving the state after k steps and
// continuing in a fresh trainer gives bit-identical weights to an
// uninterrupted run.
func TestResumeIdentical(t *testing.T) {
	opts := microOptions(t)
	run := func(tr *trainer, s *sampler, from, to int) {
		for step := from; step < to; step++ {
			b := s.make(step, 3)
			if b.err != nil {
				t.Fatal(b.err)
			}
			if _, err := tr.trainStep(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	full, s := newTestRun(t, opts)
	run(full, s, 0, opts.Steps)

	first, s1 := newTestRun(t, opts)
	run(first, s1, 0, 3)
	path := filepath.Join(opts.OutDir, StateFile)
	hist := []Point{{Step: 3, Loss: 1.5}}
	if err := first.saveState(path, 12.5, hist); err != nil {
		t.Fatal(err)
	}
	second, s2 := newTestRun(t, opts)
	wall, gotHist, err := second.loadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if wall != 12.5 || len(gotHist) != 1 || gotHist[0] != hist[0] || second.step != 3 {
		t.Fatalf("restored wall %v history %v step %d", wall, gotHist, second.step)
	}
	run(second, s2, 3, opts.Steps)
	if err := checkpoint.Equal(full.m.W, second.m.W); err != nil {
		t.Fatalf("resumed run differs from the uninterrupted one: %v", err)
	}
	if full.m.W.LogitScale != second.m.W.LogitScale {
		t.Fatalf("logit scale %v vs %v", full.m.W.LogitScale, second.m.W.LogitScale)
	}

	// A state written with other options is refused.
	other := opts
	other.LR *= 2
	tr, _ := newTestRun(t, other)
	if _, _, err := tr.loadState(path); !errors.Is(err, ErrOptions) {
		t.Fatalf("loading a state of other options: %v, want ErrOptions", err)
	}
}

// writeIDX writes a gzip'd IDX file of uint8 data.
func writeIDX(t *testing.T, path string, magic uint32, dims []int, data []byte) {
	t.Helper()
	var raw bytes.Buffer
	binary.Write(&raw, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&raw, binary.BigEndian, uint32(d))
	}
	raw.Write(data)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw.Bytes())
	zw.Close()
	if err := os.WriteFile(path, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeFashion writes a small Fashion-MNIST lookalike into a new folder.
func fakeFashion(t *testing.T, n int) string {
	dir := t.TempDir()
	pix := make([]byte, n*28*28)
	labels := make([]byte, n)
	for i := range n {
		labels[i] = byte(i % 10)
		for j := range 28 * 28 {
			pix[i*28*28+j] = byte((i*7 + j) % 256)
		}
	}
	for _, p := range []string{"train", "t10k"} {
		writeIDX(t, filepath.Join(dir, p+"-images-idx3-ubyte.gz"), 0x803, []int{n, 28, 28}, pix)
		writeIDX(t, filepath.Join(dir, p+"-labels-idx1-ubyte.gz"), 0x801, []int{n}, labels)
	}
	return dir
}

// TestRunWritesLoadableModel runs the whole command on a micro model with
// Fashion-MNIST mixed in and reads the results back with the ordinary
// loaders.
func TestRunWritesLoadableModel(t *testing.T) {
	opts := microOptions(t)
	opts.Steps, opts.EvalPerClass, opts.CheckpointEvery = 4, 1, 2
	opts.FashionDir, opts.FashionFraction = fakeFashion(t, 20), 0.5
	opts.DType = "bf16"
	var log bytes.Buffer
	res, err := Run(context.Background(), opts, &log)
	if err != nil {
		t.Fatal(err)
	}
	if !res.FashionMNIST || res.Steps != 4 {
		t.Errorf("result fashion %v steps %d", res.FashionMNIST, res.Steps)
	}
	if !strings.Contains(log.String(), "4/4") {
		t.Errorf("progress output %q lacks the final count", log.String())
	}
	w, info, err := checkpoint.Load(filepath.Join(opts.OutDir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if w.Config != res.Config || info.Config.Text.ContextLength != opts.ContextLength || info.DTypes[0] != "BF16" {
		t.Errorf("loaded config %+v dtypes %v, want %+v", w.Config, info.DTypes, res.Config)
	}
	vp, err := tokenizer.FindVocab(opts.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(vp)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != w.Config.Text.VocabSize {
		t.Errorf("vocabulary %d ids, model %d", tok.VocabSize(), w.Config.Text.VocabSize)
	}
	// Class prompts and Fashion-MNIST prompts tokenise into whole words.
	for _, text := range []string{"a photo of a solid red triangle.", "a photo of a ankle boot."} {
		if ids := tok.Encode(text); len(ids) != len(strings.Fields(text))+1 {
			t.Errorf("%q: %d tokens %v, want one per word plus the full stop", text, len(ids), ids)
		}
	}
	var rep Result
	b, err := os.ReadFile(filepath.Join(opts.OutDir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Command != opts.Command() || rep.Metrics.HeldOutAll.Classes != world.NumCompositions || rep.Metrics.HeldOutOnly.Images == 0 {
		t.Errorf("report command %q metrics %+v", rep.Command, rep.Metrics)
	}
	// Resuming a finished run trains nothing and reproduces the model.
	opts.Resume = true
	res2, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	w2, _, err := checkpoint.Load(filepath.Join(opts.OutDir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Equal(w, w2); err != nil || res2.Steps != 4 {
		t.Errorf("resumed finished run: steps %d, model differs: %v", res2.Steps, err)
	}
}

func TestRunCancelledSavesState(t *testing.T) {
	opts := microOptions(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, opts, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(opts.OutDir, StateFile)); err != nil {
		t.Fatalf("no state after cancellation: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
	}{
		{"patch", func(o *Options) { o.PatchSize = 5 }},
		{"heads", func(o *Options) { o.TextHeads = 3 }},
		{"batch", func(o *Options) { o.Batch = 1 }},
		{"lr", func(o *Options) { o.LR = 0 }},
		{"warmup", func(o *Options) { o.Warmup = o.Steps + 1 }},
		{"dtype", func(o *Options) { o.DType = "f16" }},
		{"fraction", func(o *Options) { o.FashionFraction = 2 }},
		{"out", func(o *Options) { o.OutDir = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			if err := o.Validate(); err != nil {
				t.Fatalf("defaults: %v", err)
			}
			tc.edit(&o)
			if err := o.Validate(); !errors.Is(err, ErrOptions) {
				t.Fatalf("got %v, want ErrOptions", err)
			}
		})
	}
}

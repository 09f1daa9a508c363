package pretrain

import (
	"context"
	"fmt"
	"image"
	"os"
	"strings"
	"sync"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// PromptTemplates are the class-name prompts the vocabulary also learns from,
// so zero-shot prompts tokenise into whole words; the first is the
// evaluation prompt.
var PromptTemplates = []string{
	"a photo of a {}.", "a photo of the {}.", "a picture of a {}.", "a clipart of a {}.",
	"a sketch of a {}.", "a painting of a {}.", "an image of a {}.", "a {}.",
}

// fashionTemplates caption Fashion-MNIST images; {} is the lower-cased
// class name.
var fashionTemplates = []string{
	"a photo of a {}.", "a black and white photo of a {}.", "a grayscale photo of a {}.",
	"a picture of a {}.", "a low resolution photo of a {}.", "a {}.", "a photo of a piece of clothing, a {}.",
}

// Prompt fills template's {} with name (articles are fixed: "a apple" →
// "an apple").
func Prompt(template, name string) string {
	s := strings.ReplaceAll(template, "{}", name)
	words := strings.Split(s, " ")
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "a" && words[i+1] != "" && strings.ContainsRune("aeiou", rune(words[i+1][0])) {
			words[i] = "an"
		}
	}
	return strings.Join(words, " ")
}

// learnVocab learns the BPE merges from the first n pretraining captions,
// the class prompts of every composition and the Fashion-MNIST prompts.
func learnVocab(w *world.World, n, merges int) (*tokenizer.Tokenizer, error) {
	pairs, err := w.Pretrain(0, n)
	if err != nil {
		return nil, fmt.Errorf("pretrain: vocabulary captions: %w", err)
	}
	corpus := make([]string, 0, n+len(PromptTemplates)*world.NumCompositions)
	for _, p := range pairs {
		corpus = append(corpus, p.Caption)
	}
	for _, c := range w.Classes() {
		for _, t := range PromptTemplates {
			corpus = append(corpus, Prompt(t, c.Name()))
		}
	}
	for _, c := range dataset.FashionMNISTClasses {
		for _, t := range fashionTemplates {
			corpus = append(corpus, Prompt(t, strings.ToLower(c)))
		}
	}
	return tokenizer.FromMerges(tokenizer.Learn(corpus, merges)), nil
}

// fashionSet is Fashion-MNIST's training split, when installed.
type fashionSet struct {
	items []dataset.Item
}

// loadFashion reads Fashion-MNIST from dir (or Debian's folder when dir is
// empty). A folder without the files gives nil and no error.
func loadFashion(dir string) (*fashionSet, error) {
	root := dir
	if root == "" {
		root = dataset.FashionMNISTDir
	}
	if _, err := os.Stat(root); err != nil {
		if dir == "" {
			return nil, nil
		}
		return nil, fmt.Errorf("pretrain: fashion-mnist %s: %w", dir, err)
	}
	d, err := dataset.LoadFashionMNIST(dir, dataset.Options{})
	if err != nil {
		if dir == "" {
			return nil, nil
		}
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	return &fashionSet{items: d.Train}, nil
}

// sampler makes the batches: slot k of step t holds pretraining pair
// t·Batch+k, or — with probability FashionFraction, decided by a hash of
// the seed and the slot — a Fashion-MNIST image with a templated caption.
// A batch is a pure function of the step, so a resumed run sees the same
// data.
type sampler struct {
	w       *world.World
	tok     *tokenizer.Tokenizer
	fashion *fashionSet
	frac    float64
	seed    uint64
	B, S, C int
	lut     *pixelLUT
	clipTf  preprocess.Transform
}

// batch is one step's inputs.
type batch struct {
	step    int
	pixels  []float32 // [B, 3, S, S] CLIP-normalised
	tokens  []int     // [B, C]
	fashion int       // slots from Fashion-MNIST
	err     error
}

// slot describes where slot k of step t comes from.
func (s *sampler) slot(step, k int) (fashionIdx, template int) {
	if s.fashion == nil || s.frac == 0 {
		return -1, 0
	}
	h := mix(mix(s.seed^0xfa5e, uint64(step)), uint64(k))
	if float64(h>>11)/float64(1<<53) >= s.frac {
		return -1, 0
	}
	h = mix(h, 1)
	return int(h % uint64(len(s.fashion.items))), int((h >> 32) % uint64(len(fashionTemplates)))
}

// make fills the batch of step with up to workers goroutines.
func (s *sampler) make(step, workers int) *batch {
	b := &batch{step: step, pixels: make([]float32, s.B*3*s.S*s.S), tokens: make([]int, s.B*s.C)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img := image.NewRGBA(image.Rect(0, 0, s.S, s.S))
			for {
				mu.Lock()
				k := next
				next++
				stop := k >= s.B || b.err != nil
				mu.Unlock()
				if stop {
					return
				}
				fashion, err := s.fill(b, step, k, img)
				mu.Lock()
				if err != nil && b.err == nil {
					b.err = err
				}
				if fashion {
					b.fashion++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return b
}

// fill renders and tokenises slot k of b.
func (s *sampler) fill(b *batch, step, k int, img *image.RGBA) (bool, error) {
	n := 3 * s.S * s.S
	dst := b.pixels[k*n : k*n+n]
	var text string
	fi, ti := s.slot(step, k)
	if fi >= 0 {
		it := s.fashion.items[fi]
		im, err := it.Source.Load()
		if err != nil {
			return true, fmt.Errorf("pretrain: fashion-mnist %s: %w", it.Key, err)
		}
		if _, err := s.clipTf.EvalInto(im, dst); err != nil {
			return true, fmt.Errorf("pretrain: fashion-mnist %s: %w", it.Key, err)
		}
		text = Prompt(fashionTemplates[ti], strings.ToLower(dataset.FashionMNISTClasses[it.Label]))
	} else {
		p, err := s.w.PretrainPair(step*s.B + k)
		if err != nil {
			return false, fmt.Errorf("pretrain: step %d slot %d: %w", step, k, err)
		}
		if err := s.w.RenderInto(img, p.Spec); err != nil {
			return false, fmt.Errorf("pretrain: step %d slot %d: %w", step, k, err)
		}
		s.lut.normalize(dst, img)
		text = p.Caption
	}
	ids, err := s.tok.Tokenize(text, s.C, true)
	if err != nil {
		return fi >= 0, fmt.Errorf("pretrain: caption %q: %w", text, err)
	}
	copy(b.tokens[k*s.C:], ids)
	return fi >= 0, nil
}

// stream sends the batches of steps [from, to) on the returned channel, a
// few steps ahead of the consumer, until ctx is done.
func (s *sampler) stream(ctx context.Context, from, to, workers int) <-chan *batch {
	ch := make(chan *batch, 2)
	go func() {
		defer close(ch)
		for step := from; step < to; step++ {
			b := s.make(step, workers)
			select {
			case ch <- b:
			case <-ctx.Done():
				return
			}
			if b.err != nil {
				return
			}
		}
	}()
	return ch
}

// pixelLUT maps 8-bit RGB samples to CLIP-normalised floats.
type pixelLUT [3][256]float32

func newPixelLUT() *pixelLUT {
	var t pixelLUT
	for c := range 3 {
		for v := range 256 {
			t[c][v] = (float32(v)/255 - preprocess.CLIPMean[c]) / preprocess.CLIPStd[c]
		}
	}
	return &t
}

// normalize writes img (opaque RGBA, as world renders) planar into dst
// [3, S, S].
func (t *pixelLUT) normalize(dst []float32, img *image.RGBA) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	n := w * h
	for y := 0; y < h; y++ {
		row := img.Pix[y*img.Stride : y*img.Stride+4*w]
		for x := 0; x < w; x++ {
			i := y*w + x
			dst[i] = t[0][row[4*x]]
			dst[n+i] = t[1][row[4*x+1]]
			dst[2*n+i] = t[2][row[4*x+2]]
		}
	}
}

// mix folds v into the hash h (splitmix64 finaliser).
func mix(h, v uint64) uint64 {
	z := h ^ (v + 0x9e3779b97f4a7c15 + h<<6 + h>>2)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// preprocessTransform is CLIP's evaluation transform at size (resize the
// shorter side, centre crop, normalise), used for Fashion-MNIST images.
func preprocessTransform(size int) preprocess.Transform { return preprocess.CLIPTransform(size) }

package methodtest

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
)

// recorder is a testing.TB that records failures; Fatal* ends the
// goroutine as testing does.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(f string, a ...any) {
	r.failed = append(r.failed, fmt.Sprintf(f, a...))
}
func (r *recorder) Fatalf(f string, a ...any) {
	r.Errorf(f, a...)
	runtime.Goexit()
}

// run runs check against a recorder and returns its failures.
func run(check func(t testing.TB)) []string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failed
}

func TestComparisonsCatchOneBit(t *testing.T) {
	a := []float32{1, 2, 3}
	b := []float32{1, 2, math.Nextafter32(3, 4)}
	if f := run(func(t testing.TB) { SameLogits(t, a, a) }); len(f) != 0 {
		t.Errorf("equal logits: %v", f)
	}
	if f := run(func(t testing.TB) { SameLogits(t, a, b) }); len(f) != 1 {
		t.Errorf("one bit off: %v", f)
	}
	if f := run(func(t testing.TB) { SameLogits(t, a, a[:2]) }); len(f) != 1 {
		t.Errorf("shorter logits: %v", f)
	}
	x := tensor.Named{"p": {Shape: []int{3}, Data: a}}
	y := tensor.Named{"p": {Shape: []int{3}, Data: b}}
	if f := run(func(t testing.TB) { SameNamed(t, "x", x, x) }); len(f) != 0 {
		t.Errorf("equal tensors: %v", f)
	}
	if f := run(func(t testing.TB) { SameNamed(t, "x", x, y) }); len(f) != 1 {
		t.Errorf("one bit off: %v", f)
	}
}

func TestTinyCLIPPrompts(t *testing.T) {
	m, tok := TinyCLIP{EmbedDim: 6, VisionLayers: 1, TextLayers: 2, EmbScale: 50}.Prompts(4, 3)
	if len(tok) != 4*12 || m.W.Config.EmbedDim != 6 {
		t.Fatalf("%d tokens, embed dim %d", len(tok), m.W.Config.EmbedDim)
	}
	// class 2: SOT, 3 placeholders, 3 class tokens, ".", EOT
	want := []int{18, 5, 5, 5, 8, 9, 10, 3, 19, 0, 0, 0}
	for i, v := range want {
		if tok[2*12+i] != v {
			t.Fatalf("class 2 prompt %v, want %v", tok[24:36], want)
		}
	}
}

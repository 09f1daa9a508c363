package world

import (
	"fmt"
	"image"
	"testing"
)

// BenchmarkRender measures single-core rendering throughput per domain and
// size; images/s is reported as a metric.
func BenchmarkRender(b *testing.B) {
	w, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{32, 64, 224} {
		for d := range Domain(NumDomains) {
			b.Run(fmt.Sprintf("%s/%d", d, size), func(b *testing.B) {
				dst := image.NewRGBA(image.Rect(0, 0, size, size))
				i := 0
				for b.Loop() {
					c, _ := CompositionAt(i % NumCompositions)
					if err := w.RenderInto(dst, Spec{Split: TrainSplit, Class: c, Domain: d, Index: i}); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
			})
		}
	}
}

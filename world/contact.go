package world

import (
	"image"
	"image/draw"
	"math/rand/v2"
)

// ContactSheet returns a grid of n rows by NumDomains columns of size-pixel
// tiles: each row is one seeded random class (cycling through held-out and
// seen classes) rendered in every domain, left to right in Domain order,
// separated by 2-pixel white gutters. n < 1 is treated as 1 and size is
// clamped to [8, 1024].
func (w *World) ContactSheet(n int, size int) *image.RGBA {
	n = max(n, 1)
	size = min(max(size, 8), 1024)
	const gut = 2
	sheet := image.NewRGBA(image.Rect(0, 0, NumDomains*(size+gut)+gut, n*(size+gut)+gut))
	draw.Draw(sheet, sheet.Bounds(), image.White, image.Point{}, draw.Src)
	r := rand.New(rand.NewPCG(mix(w.cfg.Seed, 0xc0de), 7))
	for row := range n {
		id := r.IntN(NumCompositions)
		c, _ := CompositionAt(id)
		for d := range Domain(NumDomains) {
			x, y := gut+int(d)*(size+gut), gut+row*(size+gut)
			tile := sheet.SubImage(image.Rect(x, y, x+size, y+size)).(*image.RGBA)
			// the spec is valid by construction, so RenderInto cannot fail.
			_ = w.RenderInto(tile, Spec{Split: TestSplit, Class: c, Domain: d, Index: row})
		}
	}
	return sheet
}

package world

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"math"
	"slices"
	"testing"
)

func newWorld(t testing.TB, mod func(*Config)) *World {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func render(t testing.TB, w *World, s Spec, size int) *image.RGBA {
	t.Helper()
	img, err := w.Render(s, size)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestCompositionRoundTrip(t *testing.T) {
	names := map[string]bool{}
	for id := range NumCompositions {
		c, ok := CompositionAt(id)
		if !ok || c.ID() != id {
			t.Fatalf("CompositionAt(%d) = %+v, %v; ID %d", id, c, ok, c.ID())
		}
		if names[c.Name()] {
			t.Fatalf("duplicate class name %q", c.Name())
		}
		names[c.Name()] = true
	}
	for _, id := range []int{-1, NumCompositions} {
		if _, ok := CompositionAt(id); ok {
			t.Errorf("CompositionAt(%d) reported ok", id)
		}
	}
	tests := []struct {
		c    Composition
		want string
	}{
		{Composition{Colour: 0, Pattern: Striped, Shape: 2}, "red striped triangle"},
		{Composition{Colour: 4, Pattern: Solid, Shape: 0}, "solid blue circle"},
		{Composition{Colour: 1, Pattern: Checkered, Shape: 7}, "orange checkered cross"},
	}
	for _, tt := range tests {
		if got := tt.c.Name(); got != tt.want {
			t.Errorf("%+v.Name() = %q, want %q", tt.c, got, tt.want)
		}
	}
}

func TestDeterminism(t *testing.T) {
	w1 := newWorld(t, nil)
	w2 := newWorld(t, nil)
	w3 := newWorld(t, func(c *Config) { c.Seed = 2 })
	for d := range Domain(NumDomains) {
		for _, size := range []int{32, 64} {
			base := Spec{Split: TrainSplit, Class: Composition{Colour: 3, Pattern: Dotted, Shape: 4}, Domain: d, Index: 5}
			a := render(t, w1, base, size)
			if b := render(t, w2, base, size); !bytes.Equal(a.Pix, b.Pix) {
				t.Errorf("%s/%d: same seed and spec gave different pixels", d, size)
			}
			if b := render(t, w1, base, size); !bytes.Equal(a.Pix, b.Pix) {
				t.Errorf("%s/%d: second render differs", d, size)
			}
			others := map[string]*image.RGBA{
				"seed":   render(t, w3, base, size),
				"index":  render(t, w1, Spec{Split: base.Split, Class: base.Class, Domain: d, Index: 6}, size),
				"split":  render(t, w1, Spec{Split: TestSplit, Class: base.Class, Domain: d, Index: 5}, size),
				"stream": render(t, w1, Spec{Split: base.Split, Class: base.Class, Domain: d, Index: 5, Stream: 9}, size),
			}
			for what, b := range others {
				if diff := meanAbsDiff(a, b); diff < 2 {
					t.Errorf("%s/%d: changing the %s changed pixels by only %.2f on average", d, size, what, diff)
				}
			}
		}
	}
}

func meanAbsDiff(a, b *image.RGBA) float64 {
	s := 0.0
	for i := range a.Pix {
		s += math.Abs(float64(a.Pix[i]) - float64(b.Pix[i]))
	}
	return s / float64(len(a.Pix))
}

func TestRenderIntoSubImage(t *testing.T) {
	w := newWorld(t, nil)
	s := Spec{Split: TestSplit, Class: Composition{Colour: 5, Pattern: Checkered, Shape: 6}, Domain: Painting, Index: 3}
	want := render(t, w, s, 40)
	big := image.NewRGBA(image.Rect(0, 0, 100, 100))
	sub := big.SubImage(image.Rect(30, 20, 70, 60)).(*image.RGBA)
	if err := w.RenderInto(sub, s); err != nil {
		t.Fatal(err)
	}
	for y := range 40 {
		for x := range 40 {
			if got := big.RGBAAt(30+x, 20+y); got != want.RGBAAt(x, y) {
				t.Fatalf("pixel (%d,%d) = %v, want %v", x, y, got, want.RGBAAt(x, y))
			}
		}
	}
	if big.RGBAAt(10, 10).A != 0 {
		t.Error("RenderInto wrote outside the sub-image")
	}
}

func TestRenderErrors(t *testing.T) {
	w := newWorld(t, nil)
	ok := Spec{Class: Composition{Colour: 1, Pattern: 1, Shape: 1}}
	tests := []struct {
		name string
		s    Spec
		size int
	}{
		{"small size", ok, 4},
		{"huge size", ok, 5000},
		{"bad split", Spec{Split: 7, Class: ok.Class}, 32},
		{"bad colour", Spec{Class: Composition{Colour: 99}}, 32},
		{"bad shape", Spec{Class: Composition{Shape: -1}}, 32},
		{"bad domain", Spec{Class: ok.Class, Domain: 4}, 32},
		{"negative index", Spec{Class: ok.Class, Index: -1}, 32},
	}
	for _, tt := range tests {
		if _, err := w.Render(tt.s, tt.size); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Render error %v, want ErrConfig", tt.name, err)
		}
	}
	if err := w.RenderInto(image.NewRGBA(image.Rect(0, 0, 32, 16)), ok); !errors.Is(err, ErrConfig) {
		t.Errorf("non-square destination: error %v, want ErrConfig", err)
	}
	if _, err := w.Scene(Spec{Class: ok.Class, Domain: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("Scene with bad domain: error %v, want ErrConfig", err)
	}
}

func TestNewErrors(t *testing.T) {
	var allRed []Composition
	for p := range Pattern(len(Patterns)) {
		for s := range Shape(len(Shapes)) {
			allRed = append(allRed, Composition{Colour: 0, Pattern: p, Shape: s})
		}
	}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"holdout fraction", func(c *Config) { c.HoldoutFraction = 0.7 }},
		{"negative holdout", func(c *Config) { c.HoldoutFraction = -0.1 }},
		{"size", func(c *Config) { c.Size = 2 }},
		{"clutter", func(c *Config) { c.MaxClutter = 40 }},
		{"empty domains", func(c *Config) { c.PretrainDomains = []Domain{} }},
		{"bad domain", func(c *Config) { c.PretrainDomains = []Domain{Photo, 9} }},
		{"bad held-out", func(c *Config) { c.HeldOut = []Composition{{Colour: 20}} }},
		{"colour fully held out", func(c *Config) { c.HeldOut = allRed }},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.mod(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New error %v, want ErrConfig", tt.name, err)
		}
	}
}

func TestHoldout(t *testing.T) {
	for _, frac := range []float64{0.25, 0.3, 0.5} {
		w := newWorld(t, func(c *Config) { c.HoldoutFraction = frac; c.Seed = 7 })
		held, seen := w.HeldOut(), w.Seen()
		if len(held)+len(seen) != NumCompositions {
			t.Fatalf("frac %g: %d held + %d seen != %d", frac, len(held), len(seen), NumCompositions)
		}
		want := int(frac*float64(NumCompositions) + 0.5)
		// the greedy choice may stop short only when the pair constraint bites.
		if len(held) > want || len(held) < want*9/10 {
			t.Errorf("frac %g: %d held out, want about %d", frac, len(held), want)
		}
		for _, c := range held {
			if !w.IsHeldOut(c) {
				t.Errorf("IsHeldOut(%s) false for a held-out class", c)
			}
		}
		// every attribute value and every pair of values occurs in pretraining.
		pairs := map[[4]int]bool{}
		for _, c := range seen {
			if w.IsHeldOut(c) {
				t.Errorf("IsHeldOut(%s) true for a seen class", c)
			}
			pairs[[4]int{0, int(c.Colour), int(c.Pattern), 0}] = true
			pairs[[4]int{1, int(c.Colour), int(c.Shape), 0}] = true
			pairs[[4]int{2, int(c.Pattern), int(c.Shape), 0}] = true
		}
		if n := len(pairs); n != len(Colours)*len(Patterns)+len(Colours)*len(Shapes)+len(Patterns)*len(Shapes) {
			t.Errorf("frac %g: only %d attribute pairs occur in pretraining", frac, n)
		}
		// no pretraining pair uses a held-out class; every seen class occurs.
		pre, err := w.Pretrain(0, 3000)
		if err != nil {
			t.Fatal(err)
		}
		classes := map[Composition]bool{}
		domains := map[Domain]int{}
		for _, p := range pre {
			if w.IsHeldOut(p.Spec.Class) {
				t.Fatalf("frac %g: pretraining pair %s uses held-out class %s", frac, p.Spec.Key(), p.Spec.Class)
			}
			if p.Spec.Split != PretrainSplit || p.Source.Spec != p.Spec {
				t.Fatalf("pair %d: spec %+v, source spec %+v", p.Spec.Index, p.Spec, p.Source.Spec)
			}
			classes[p.Spec.Class] = true
			domains[p.Spec.Domain]++
		}
		if len(classes) != len(seen) {
			t.Errorf("frac %g: 3000 pairs cover %d of %d seen classes", frac, len(classes), len(seen))
		}
		if len(domains) != NumDomains {
			t.Errorf("frac %g: pretraining domains %v, want all %d", frac, domains, NumDomains)
		}
	}
	// seeds choose different held-out sets; explicit lists are honoured.
	a, b := newWorld(t, nil).HeldOut(), newWorld(t, func(c *Config) { c.Seed = 99 }).HeldOut()
	if slices.Equal(a, b) {
		t.Error("different seeds chose the same held-out classes")
	}
	explicit := []Composition{{Colour: 2, Pattern: Striped, Shape: 3}, {Colour: 0, Pattern: Solid, Shape: 0}}
	w := newWorld(t, func(c *Config) { c.HeldOut = explicit; c.PretrainDomains = []Domain{Sketch} })
	if got := w.HeldOut(); !slices.Equal(got, []Composition{explicit[1], explicit[0]}) {
		t.Errorf("explicit HeldOut: got %v", got)
	}
	p, err := w.PretrainPair(11)
	if err != nil || p.Spec.Domain != Sketch {
		t.Errorf("PretrainPair with PretrainDomains=[sketch]: %+v, %v", p.Spec, err)
	}
	if _, err := w.PretrainPair(-1); !errors.Is(err, ErrConfig) {
		t.Errorf("PretrainPair(-1) error %v", err)
	}
}

// TestColourRecognisable checks, per domain, that the palette colour most
// strongly present in the image is the class colour: styles must keep the
// colour attribute readable.
func TestColourRecognisable(t *testing.T) {
	w := newWorld(t, nil)
	const n, size = 96, 48
	for d := range Domain(NumDomains) {
		correct := 0
		for i := range n {
			c, _ := CompositionAt((i * 37) % NumCompositions)
			img := render(t, w, Spec{Split: TestSplit, Class: c, Domain: d, Index: i}, size)
			if dominantColour(img) == c.Colour {
				correct++
			}
		}
		if acc := float64(correct) / n; acc < 0.93 {
			t.Errorf("%s: dominant colour matches the class in %.0f%% of images, want ≥ 93%%", d, 100*acc)
		}
	}
}

// dominantColour votes the saturated pixels of img to their nearest palette
// colour.
func dominantColour(img *image.RGBA) Colour {
	votes := make([]int, len(palette))
	for i := 0; i < len(img.Pix); i += 4 {
		r, g, b := float64(img.Pix[i])/255, float64(img.Pix[i+1])/255, float64(img.Pix[i+2])/255
		mx, mn := math.Max(r, math.Max(g, b)), math.Min(r, math.Min(g, b))
		if mx < 0.3 || (mx-mn)/mx < 0.45 {
			continue
		}
		best, bd := 0, math.Inf(1)
		for k, p := range palette {
			dr, dg, db := r-float64(p[0])/255, g-float64(p[1])/255, b-float64(p[2])/255
			if dd := dr*dr + dg*dg + db*db; dd < bd {
				best, bd = k, dd
			}
		}
		votes[best]++
	}
	return Colour(slices.Index(votes, slices.Max(votes)))
}

type styleStats struct {
	white, black, sat, hf float64 // fractions / means over pixels
}

func measure(img *image.RGBA) styleStats {
	var s styleStats
	b := img.Bounds()
	n := float64(b.Dx() * b.Dy())
	for y := range b.Dy() {
		for x := range b.Dx() {
			p := img.RGBAAt(x, y)
			r, g, bl := float64(p.R)/255, float64(p.G)/255, float64(p.B)/255
			mx, mn := math.Max(r, math.Max(g, bl)), math.Min(r, math.Min(g, bl))
			if mn > 0.85 {
				s.white++
			}
			if mx < 0.2 {
				s.black++
			}
			if mx > 0 {
				s.sat += (mx - mn) / mx
			}
			if x > 0 {
				s.hf += math.Abs(float64(p.G)-float64(img.RGBAAt(x-1, y).G)) / 255
			}
		}
	}
	s.white /= n
	s.black /= n
	s.sat /= n
	s.hf /= n
	return s
}

func TestDomainStylesDiffer(t *testing.T) {
	w := newWorld(t, nil)
	const n = 48
	var st [NumDomains]styleStats
	for d := range Domain(NumDomains) {
		for i := range n {
			c, _ := CompositionAt((i * 53) % NumCompositions)
			m := measure(render(t, w, Spec{Split: TrainSplit, Class: c, Domain: d, Index: i}, 64))
			st[d].white += m.white / n
			st[d].black += m.black / n
			st[d].sat += m.sat / n
			st[d].hf += m.hf / n
		}
		t.Logf("%-8s %+v", d, st[d])
	}
	// sketch is ink on paper: the whitest style.
	for d := range Domain(NumDomains) {
		if d != Sketch && st[Sketch].white < st[d].white+0.2 {
			t.Errorf("sketch white fraction %.3f not well above %s's %.3f", st[Sketch].white, d, st[d].white)
		}
		// clipart has bold black outlines.
		if d != Clipart && st[Clipart].black < 2*st[d].black+0.005 {
			t.Errorf("clipart black fraction %.4f not well above %s's %.4f", st[Clipart].black, d, st[d].black)
		}
	}
	// photo carries sensor noise, flat styles do not.
	for _, d := range []Domain{Clipart, Sketch} {
		if st[Photo].hf < 1.2*st[d].hf {
			t.Errorf("photo high-frequency energy %.4f not above %s's %.4f", st[Photo].hf, d, st[d].hf)
		}
	}
	// painting and photo both fill the frame; painting is more saturated.
	if st[Painting].sat < st[Photo].sat+0.02 || st[Painting].white > 0.1 || st[Photo].white > 0.1 {
		t.Errorf("photo %+v and painting %+v not told apart by saturation and fill", st[Photo], st[Painting])
	}
}

func TestSceneLayout(t *testing.T) {
	w := newWorld(t, nil)
	sizes := map[Size]int{}
	positions := map[string]int{}
	for i := range 400 {
		c, _ := CompositionAt(i % NumCompositions)
		sc, err := w.Scene(Spec{Class: c, Domain: Domain(i % NumDomains), Index: i})
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := sizeRadius[sc.Size][0], sizeRadius[sc.Size][1]
		if sc.Radius < lo || sc.Radius > hi {
			t.Errorf("scene %d: %s radius %.3f outside [%g, %g]", i, sc.Size, sc.Radius, lo, hi)
		}
		if sc.X-sc.Radius < 0 || sc.X+sc.Radius > 1 || sc.Y-sc.Radius < 0 || sc.Y+sc.Radius > 1 {
			t.Errorf("scene %d: object at (%.2f,%.2f) r %.2f leaves the frame", i, sc.X, sc.Y, sc.Radius)
		}
		if math.Abs(sc.Angle) > 0.4 || sc.Distractors < 0 || sc.Distractors > w.Config().MaxClutter {
			t.Errorf("scene %d: angle %.2f, %d distractors", i, sc.Angle, sc.Distractors)
		}
		sizes[sc.Size]++
		positions[sc.Position()]++
	}
	if len(sizes) != 3 || len(positions) != 9 {
		t.Errorf("400 scenes used sizes %v and positions %v; want all 3 and all 9", sizes, positions)
	}
}

func TestConcurrentRender(t *testing.T) {
	w := newWorld(t, nil)
	specs := make([]Spec, 32)
	want := make([][]byte, len(specs))
	for i := range specs {
		c, _ := CompositionAt(i * 7)
		specs[i] = Spec{Split: TrainSplit, Class: c, Domain: Domain(i % NumDomains), Index: i}
		want[i] = render(t, w, specs[i], 32+i%3*16).Pix
	}
	errs := make(chan string, 4*len(specs))
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range specs {
				i := (k + g*5) % len(specs)
				img, err := w.Render(specs[i], 32+i%3*16)
				if err != nil || !bytes.Equal(img.Pix, want[i]) {
					errs <- fmt.Sprintf("goroutine %d: spec %s differs (err %v)", g, specs[i].Key(), err)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

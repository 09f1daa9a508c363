package world

import (
	"math"
	"math/rand/v2"
)

// Size is the coarse size of the object, as captions name it.
type Size int

// The object sizes.
const (
	Small Size = iota
	Medium
	Large
)

var sizeNames = [...]string{"small", "medium", "large"}

// String returns "small", "medium" or "large".
func (s Size) String() string {
	if s < 0 || int(s) >= len(sizeNames) {
		return "size?"
	}
	return sizeNames[s]
}

// radius range per Size, as a fraction of the image side.
var sizeRadius = [...][2]float64{{0.19, 0.23}, {0.25, 0.29}, {0.31, 0.36}}

// Scene is the resolution-independent layout of one sample: everything a
// caption may describe, plus the style parameters of its rendering.
type Scene struct {
	Spec Spec
	Size Size
	// X and Y are the object's centre as fractions of the image side
	// (0,0 is the top left).
	X, Y float64
	// Radius is the object's circumradius as a fraction of the image side.
	Radius float64
	// Angle is the object's rotation in radians, within ±0.4.
	Angle float64
	// Distractors is the number of background clutter items.
	Distractors int

	clutter []distractor
	st      style
}

// distractor is a small blob or line in another colour. Coordinates are
// fractions of the image side.
type distractor struct {
	line       bool
	x0, y0     float64 // blob centre or line start
	x1, y1     float64 // line end
	rx, ry     float64 // blob radii; rx is the line half-width
	col        [3]float32
	outlineCol [3]float32
}

// style holds the per-sample rendering parameters of the domain.
type style struct {
	bgTop, bgBottom [3]float32 // background colours (gradient or flat)
	lightAngle      float64    // photo: direction light comes from
	patternAngle    float64    // stripe direction, local frame
	patternPhase    [2]float64 // pattern offset, in periods
	colourGain      float32    // painting: brightness jitter
	colourTint      [3]float32 // painting: hue jitter target
	tintAmount      float32
	brushAngle      float64
	noise           float32 // photo: noise sigma
}

// Position returns the coarse position of the object as captions name it:
// "top left", "left", "centre", "bottom", …
func (s Scene) Position() string {
	h, v := "", ""
	switch {
	case s.X < 0.43:
		h = "left"
	case s.X > 0.57:
		h = "right"
	}
	switch {
	case s.Y < 0.43:
		v = "top"
	case s.Y > 0.57:
		v = "bottom"
	}
	switch {
	case h == "" && v == "":
		return "centre"
	case h == "":
		return v
	case v == "":
		return h
	}
	return v + " " + h
}

// Scene returns the layout of the sample s. It returns an error for an
// out-of-range spec.
func (w *World) Scene(s Spec) (Scene, error) {
	if err := s.validate(); err != nil {
		return Scene{}, err
	}
	return w.scene(s), nil
}

func (w *World) scene(s Spec) Scene {
	r := w.rng(s, saltScene)
	sc := Scene{Spec: s, Size: Size(r.IntN(3))}
	lo, hi := sizeRadius[sc.Size][0], sizeRadius[sc.Size][1]
	sc.Radius = lo + (hi-lo)*r.Float64()
	m := sc.Radius + 0.04
	sc.X = m + (1-2*m)*r.Float64()
	sc.Y = m + (1-2*m)*r.Float64()
	sc.Angle = (r.Float64()*2 - 1) * 0.4
	sc.Distractors = 0
	if w.cfg.MaxClutter > 0 {
		sc.Distractors = r.IntN(w.cfg.MaxClutter + 1)
	}
	for range sc.Distractors {
		sc.clutter = append(sc.clutter, newDistractor(r, s.Class.Colour))
	}
	sc.st = newStyle(r, s.Domain)
	return sc
}

func newDistractor(r *rand.Rand, obj Colour) distractor {
	var d distractor
	// another palette colour, or grey.
	k := r.IntN(len(palette))
	if Colour(k) == obj {
		g := 0.35 + 0.4*r.Float32()
		d.col = [3]float32{g, g, g}
	} else {
		d.col = rgbf(palette[k])
	}
	d.outlineCol = [3]float32{0.1, 0.1, 0.1}
	d.x0, d.y0 = r.Float64(), r.Float64()
	if r.IntN(2) == 0 {
		d.line = true
		a := r.Float64() * 2 * math.Pi
		l := 0.08 + 0.14*r.Float64()
		d.x1, d.y1 = d.x0+l*math.Cos(a), d.y0+l*math.Sin(a)
		d.rx = 0.008 + 0.008*r.Float64()
	} else {
		d.rx = 0.025 + 0.035*r.Float64()
		d.ry = d.rx * (0.6 + 0.4*r.Float64())
	}
	return d
}

func newStyle(r *rand.Rand, d Domain) style {
	var st style
	st.patternAngle = float64(r.IntN(4)) * math.Pi / 4
	st.patternPhase = [2]float64{r.Float64(), r.Float64()}
	st.lightAngle = -math.Pi/2 + (r.Float64()*2-1)*1.0 // mostly from above
	st.brushAngle = (r.Float64()*2 - 1) * 0.8
	st.colourGain = 1
	switch d {
	case Photo:
		// muted backdrop: a wall colour fading to a darker floor.
		h := r.Float64()
		st.bgTop = hsv(h, 0.08+0.2*r.Float64(), 0.7+0.25*r.Float64())
		st.bgBottom = hsv(h+0.1*(r.Float64()-0.5), 0.1+0.2*r.Float64(), 0.35+0.25*r.Float64())
		st.noise = 0.015 + 0.025*r.Float32()
	case Clipart:
		if r.IntN(2) == 0 {
			st.bgTop = [3]float32{1, 1, 1}
		} else {
			st.bgTop = hsv(r.Float64(), 0.12+0.12*r.Float64(), 0.97)
		}
		st.bgBottom = st.bgTop
	case Sketch:
		p := 0.93 + 0.05*r.Float32()
		st.bgTop = [3]float32{p, p * 0.99, p * 0.95}
		st.bgBottom = st.bgTop
	case Painting:
		h := r.Float64()
		st.bgTop = hsv(h, 0.15+0.25*r.Float64(), 0.45+0.4*r.Float64())
		st.bgBottom = hsv(h+0.25*(r.Float64()-0.5), 0.15+0.25*r.Float64(), 0.45+0.4*r.Float64())
		st.colourGain = 0.88 + 0.24*r.Float32()
		st.colourTint = hsv(r.Float64(), 0.8, 0.9)
		st.tintAmount = 0.12 * r.Float32()
	}
	return st
}

// rgbf converts 8-bit RGB to [0,1] floats.
func rgbf(p [3]uint8) [3]float32 {
	return [3]float32{float32(p[0]) / 255, float32(p[1]) / 255, float32(p[2]) / 255}
}

// hsv converts hue (wrapped to [0,1)), saturation and value to RGB.
func hsv(h, s, v float64) [3]float32 {
	h -= math.Floor(h)
	h *= 6
	i := int(h)
	f := h - float64(i)
	p, q, t := v*(1-s), v*(1-s*f), v*(1-s*(1-f))
	var r, g, b float64
	switch i {
	case 0:
		r, g, b = v, t, p
	case 1:
		r, g, b = q, v, p
	case 2:
		r, g, b = p, v, t
	case 3:
		r, g, b = p, q, v
	case 4:
		r, g, b = t, p, v
	default:
		r, g, b = v, p, q
	}
	return [3]float32{float32(r), float32(g), float32(b)}
}

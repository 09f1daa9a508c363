package world

import (
	"fmt"
	"image"
	"math"
	"math/rand/v2"
	"sync"
)

// Render draws sample s as a size×size image; size 0 means the world's
// default size.
func (w *World) Render(s Spec, size int) (*image.RGBA, error) {
	if size == 0 {
		size = w.cfg.Size
	}
	if size < 8 || size > 1024 {
		return nil, fmt.Errorf("world: render %s: size %d not in [8, 1024]: %w", s.Key(), size, ErrConfig)
	}
	dst := image.NewRGBA(image.Rect(0, 0, size, size))
	if err := w.RenderInto(dst, s); err != nil {
		return nil, err
	}
	return dst, nil
}

// RenderInto draws sample s into dst, which must be square with a side in
// [8, 1024]. It lets callers reuse one image across samples.
func (w *World) RenderInto(dst *image.RGBA, s Spec) error {
	b := dst.Bounds()
	if b.Dx() != b.Dy() || b.Dx() < 8 || b.Dx() > 1024 {
		return fmt.Errorf("world: render %s: destination %v is not a square of side 8..1024: %w", s.Key(), b, ErrConfig)
	}
	if err := s.validate(); err != nil {
		return err
	}
	sc := w.scene(s)
	c := getCanvas(b.Dx())
	defer putCanvas(c)
	c.draw(&sc, w.rng(s, saltPixels))
	c.store(dst)
	return nil
}

// canvas is a float RGB working buffer in [0,1], row-major, 3 floats a pixel.
type canvas struct {
	n     int
	pix   []float32
	tex   []float32 // painting: brush texture, one float a pixel
	noise [2]valueNoise
}

var canvasPool = sync.Pool{New: func() any { return new(canvas) }}

func getCanvas(n int) *canvas {
	c := canvasPool.Get().(*canvas)
	c.n = n
	if cap(c.pix) < 3*n*n {
		c.pix = make([]float32, 3*n*n)
		c.tex = make([]float32, n*n)
	}
	c.pix = c.pix[:3*n*n]
	c.tex = c.tex[:n*n]
	return c
}

func putCanvas(c *canvas) { canvasPool.Put(c) }

// store converts the canvas to 8-bit RGBA.
func (c *canvas) store(dst *image.RGBA) {
	b := dst.Bounds()
	for y := range c.n {
		row := dst.Pix[(y+b.Min.Y-dst.Rect.Min.Y)*dst.Stride+(b.Min.X-dst.Rect.Min.X)*4:]
		src := c.pix[3*y*c.n : 3*(y+1)*c.n]
		for x := range c.n {
			row[4*x] = to8(src[3*x])
			row[4*x+1] = to8(src[3*x+1])
			row[4*x+2] = to8(src[3*x+2])
			row[4*x+3] = 255
		}
	}
}

func to8(v float32) uint8 {
	if v <= 0 {
		return 0
	}
	if v >= 1 {
		return 255
	}
	return uint8(v*255 + 0.5)
}

// blend mixes col over pixel i with opacity a.
func (c *canvas) blend(i int, col [3]float32, a float32) {
	p := c.pix[3*i : 3*i+3 : 3*i+3]
	p[0] += (col[0] - p[0]) * a
	p[1] += (col[1] - p[1]) * a
	p[2] += (col[2] - p[2]) * a
}

// valueNoise is smooth lattice noise over the unit square.
type valueNoise struct {
	g    int
	vals [(9 + 1) * (9 + 1)]float32
}

func (v *valueNoise) init(r *rand.Rand, g int) {
	v.g = g
	for i := range (g + 1) * (g + 1) {
		v.vals[i] = r.Float32()
	}
}

// at samples the noise at (x, y) in [0,1]²; the result is in [0,1].
func (v *valueNoise) at(x, y float64) float32 {
	fx, fy := x*float64(v.g), y*float64(v.g)
	ix, iy := int(fx), int(fy)
	ix = min(max(ix, 0), v.g-1)
	iy = min(max(iy, 0), v.g-1)
	tx, ty := float32(fx-float64(ix)), float32(fy-float64(iy))
	tx = tx * tx * (3 - 2*tx)
	ty = ty * ty * (3 - 2*ty)
	s := v.g + 1
	a, b := v.vals[iy*s+ix], v.vals[iy*s+ix+1]
	c, d := v.vals[(iy+1)*s+ix], v.vals[(iy+1)*s+ix+1]
	top := a + (b-a)*tx
	bot := c + (d-c)*tx
	return top + (bot-top)*ty
}

func clamp01(v float64) float32 {
	if v <= 0 {
		return 0
	}
	if v >= 1 {
		return 1
	}
	return float32(v)
}

// coverage is the anti-aliased coverage of a pixel whose centre lies at
// signed distance d pixels from an edge.
func coverage(d float64) float32 { return clamp01(0.5 - d) }

func mixc(a, b [3]float32, t float32) [3]float32 {
	return [3]float32{a[0] + (b[0]-a[0])*t, a[1] + (b[1]-a[1])*t, a[2] + (b[2]-a[2])*t}
}

func scale(a [3]float32, g float32) [3]float32 { return [3]float32{a[0] * g, a[1] * g, a[2] * g} }

// secondary is the colour of pattern marks on an object of colour col: a
// pale tint, or a dark shade for very light colours.
func secondary(col [3]float32) [3]float32 {
	if 0.3*col[0]+0.59*col[1]+0.11*col[2] > 0.7 {
		return scale(col, 0.72)
	}
	return mixc(col, [3]float32{1, 1, 1}, 0.85)
}

// frame maps pixel centres to the object's unit frame.
type frame struct {
	cx, cy, r  float64 // centre and radius in pixels
	cos, sin   float64
	pcos, psin float64 // pattern direction in the unit frame
	period     float64 // pattern period in unit-frame units
	phase      [2]float64
	pat        Pattern
}

func newFrame(sc *Scene, n int) frame {
	f := frame{
		cx: sc.X * float64(n), cy: sc.Y * float64(n), r: sc.Radius * float64(n),
		cos: math.Cos(sc.Angle), sin: math.Sin(sc.Angle),
		pcos: math.Cos(sc.st.patternAngle), psin: math.Sin(sc.st.patternAngle),
		phase: sc.st.patternPhase, pat: sc.Spec.Class.Pattern,
	}
	switch f.pat {
	case Striped:
		f.period = math.Max(0.5, 4/f.r)
	case Dotted:
		f.period = math.Max(0.52, 4.5/f.r)
	case Checkered:
		f.period = math.Max(0.5, 6/f.r)
	}
	return f
}

// local returns the unit-frame coordinates of pixel centre (px, py).
func (f *frame) local(px, py float64) (u, v float64) {
	dx, dy := px-f.cx, py-f.cy
	return (f.cos*dx + f.sin*dy) / f.r, (-f.sin*dx + f.cos*dy) / f.r
}

// bbox returns the pixel range covering the object plus pad pixels.
func (f *frame) bbox(n int, pad float64) (x0, y0, x1, y1 int) {
	e := f.r*shapeBound + pad
	x0 = max(0, int(math.Floor(f.cx-e)))
	y0 = max(0, int(math.Floor(f.cy-e)))
	x1 = min(n, int(math.Ceil(f.cx+e)))
	y1 = min(n, int(math.Ceil(f.cy+e)))
	return
}

// patternCoords returns the pattern-lattice coordinates (in periods) of a
// unit-frame point.
func (f *frame) patternCoords(u, v float64) (a, b float64) {
	a = (u*f.pcos+v*f.psin)/f.period + f.phase[0]
	b = (-u*f.psin+v*f.pcos)/f.period + f.phase[1]
	return
}

// mark returns how much of the pattern's secondary colour covers the point
// (u, v): 0 for solid objects.
func (f *frame) mark(u, v float64) float32 {
	if f.pat == Solid {
		return 0
	}
	a, b := f.patternCoords(u, v)
	px := f.period * f.r // pixels per period
	switch f.pat {
	case Striped:
		t := math.Abs(a-math.Floor(a)-0.5) - 0.25 // <0 inside a stripe
		return coverage(t * px)
	case Dotted:
		// staggered rows of dots
		row := math.Floor(b)
		if int64(row)&1 == 1 {
			a += 0.5
		}
		dx, dy := a-math.Floor(a)-0.5, b-row-0.5
		return coverage((math.Sqrt(dx*dx+dy*dy) - 0.27) * px)
	default: // checkered
		e, dark := checker(a, b)
		if !dark {
			e = -e
		}
		return clamp01(0.5 + e*px)
	}
}

// checker locates pattern point (a, b) on a checkerboard with two squares
// per period: e is the distance to the nearest square edge, in periods, and
// dark tells which colour the square has.
func checker(a, b float64) (e float64, dark bool) {
	a, b = 2*a, 2*b
	fa, fb := math.Floor(a), math.Floor(b)
	ga, gb := a-fa-0.5, b-fb-0.5
	e = math.Min(0.5-math.Abs(ga), 0.5-math.Abs(gb)) / 2
	return e, (int64(fa)+int64(fb))&1 == 1
}

// draw renders the scene into the canvas.
func (c *canvas) draw(sc *Scene, r *rand.Rand) {
	switch sc.Spec.Domain {
	case Photo:
		c.drawPhoto(sc, r)
	case Clipart:
		c.drawClipart(sc)
	case Sketch:
		c.drawSketch(sc, r)
	default:
		c.drawPainting(sc, r)
	}
}

// distractorSDF returns the signed distance in pixels from pixel centre
// (px, py) to distractor d, drawn on an n-pixel image.
func distractorSDF(d *distractor, px, py, n float64) float64 {
	x, y := px/n, py/n
	if d.line {
		ex, ey := d.x1-d.x0, d.y1-d.y0
		wx, wy := x-d.x0, y-d.y0
		t := (wx*ex + wy*ey) / (ex*ex + ey*ey)
		t = math.Max(0, math.Min(1, t))
		bx, by := wx-ex*t, wy-ey*t
		return (math.Sqrt(bx*bx+by*by) - d.rx) * n
	}
	dx, dy := (x-d.x0)/d.rx, (y-d.y0)/d.ry
	return (math.Sqrt(dx*dx+dy*dy) - 1) * d.ry * n
}

// distractorBox returns the pixel range a distractor may touch.
func distractorBox(d *distractor, n int) (x0, y0, x1, y1 int) {
	fn := float64(n)
	var lx, ly, hx, hy float64
	if d.line {
		lx, hx = math.Min(d.x0, d.x1)-d.rx, math.Max(d.x0, d.x1)+d.rx
		ly, hy = math.Min(d.y0, d.y1)-d.rx, math.Max(d.y0, d.y1)+d.rx
	} else {
		lx, hx, ly, hy = d.x0-d.rx, d.x0+d.rx, d.y0-d.ry, d.y0+d.ry
	}
	x0 = max(0, int(lx*fn)-2)
	y0 = max(0, int(ly*fn)-2)
	x1 = min(n, int(hx*fn)+3)
	y1 = min(n, int(hy*fn)+3)
	return
}

// drawClutter draws every distractor. outline > 0 adds a dark outline of
// that width; strokeOnly draws just an outline in the distractor's colour.
func (c *canvas) drawClutter(sc *Scene, outline float64, strokeOnly bool, jitter bool) {
	n := c.n
	fn := float64(n)
	for k := range sc.clutter {
		d := &sc.clutter[k]
		x0, y0, x1, y1 := distractorBox(d, n)
		for y := y0; y < y1; y++ {
			for x := x0; x < x1; x++ {
				px, py := float64(x)+0.5, float64(y)+0.5
				dist := distractorSDF(d, px, py, fn)
				i := y*n + x
				if strokeOnly && !d.line {
					w := math.Max(0.8, fn/80)
					c.blend(i, d.col, coverage(math.Abs(dist+w/2)-w/2))
					continue
				}
				col := d.col
				if jitter {
					col = scale(col, 0.9+0.2*c.tex[i])
				}
				c.blend(i, col, coverage(dist))
				if outline > 0 && !d.line {
					c.blend(i, d.outlineCol, coverage(math.Abs(dist+outline/2)-outline/2))
				}
			}
		}
	}
}

// noisePix returns an approximately normal deviate (an Irwin–Hall sum of
// three uniform 16-bit parts) and three small uniform deviates in
// [-0.5, 0.5), all from one 64-bit draw.
func noisePix(r *rand.Rand) (g float32, cr, cg, cb float32) {
	u := r.Uint64()
	s := float32(u&0xffff) + float32(u>>16&0xffff) + float32(u>>32&0xffff)
	// mean 1.5·65535, sd sqrt(3/12)·65535
	g = (s - 98302.5) * (1 / 32767.5)
	cr = float32(u>>48&0x1f)/32 - 0.5
	cg = float32(u>>53&0x1f)/32 - 0.5
	cb = float32(u>>58&0x1f)/32 - 0.5
	return
}

func (c *canvas) drawPhoto(sc *Scene, r *rand.Rand) {
	n := c.n
	fn := float64(n)
	st := &sc.st
	// backdrop: wall fading to floor, lit from the light's side.
	lx, ly := math.Cos(st.lightAngle), math.Sin(st.lightAngle)
	for y := range n {
		ty := (float64(y) + 0.5) / fn
		t := clamp01((ty - 0.45) / 0.3)
		t = t * t * (3 - 2*t)
		row := mixc(st.bgTop, st.bgBottom, t)
		for x := range n {
			tx := (float64(x) + 0.5) / fn
			g := float32(0.82 + 0.3*((tx-0.5)*lx+(ty-0.5)*ly))
			i := 3 * (y*n + x)
			c.pix[i], c.pix[i+1], c.pix[i+2] = row[0]*g, row[1]*g, row[2]*g
		}
	}
	c.drawClutter(sc, 0, false, false)

	f := newFrame(sc, n)
	col := rgbf(palette[sc.Spec.Class.Colour])
	sec := secondary(col)
	// soft shadow cast away from the light.
	sox, soy := -lx*0.18*f.r, -ly*0.18*f.r+0.06*f.r
	blur := 0.2*f.r + 1
	x0, y0, x1, y1 := f.bbox(n, blur+0.25*f.r)
	shadow := [3]float32{0, 0, 0}
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			u, v := f.local(float64(x)+0.5-sox, float64(y)+0.5-soy)
			if u*u+v*v > (shapeBound+blur/f.r)*(shapeBound+blur/f.r) {
				continue
			}
			d := sc.Spec.Class.Shape.sdf(u, v) * f.r
			a := clamp01(0.5 - d/(2*blur))
			c.blend(y*n+x, shadow, 0.45*a)
		}
	}
	// the object, shaded by the light with a specular spot.
	hx, hy := f.cx+lx*0.45*f.r, f.cy+ly*0.45*f.r
	hr2 := 0.4 * f.r * 0.4 * f.r
	x0, y0, x1, y1 = f.bbox(n, 1)
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			px, py := float64(x)+0.5, float64(y)+0.5
			u, v := f.local(px, py)
			if u*u+v*v > shapeBound*shapeBound+2/f.r {
				continue
			}
			d := sc.Spec.Class.Shape.sdf(u, v) * f.r
			a := coverage(d)
			if a == 0 {
				continue
			}
			o := mixc(col, sec, f.mark(u, v))
			lam := 0.5 + 0.5*((px-f.cx)*lx+(py-f.cy)*ly)/f.r
			o = scale(o, float32(0.72+0.45*lam))
			dx, dy := px-hx, py-hy
			if h := 1 - (dx*dx+dy*dy)/hr2; h > 0 {
				o = mixc(o, [3]float32{1, 1, 1}, float32(0.35*h*h))
			}
			c.blend(y*n+x, o, a)
		}
	}
	// sensor noise: luminance plus a little chroma.
	for i := range n * n {
		g, cr, cg, cb := noisePix(r)
		g *= st.noise
		k := st.noise * 0.6
		p := c.pix[3*i : 3*i+3 : 3*i+3]
		p[0] += g + cr*k
		p[1] += g + cg*k
		p[2] += g + cb*k
	}
}

func (c *canvas) fill(col [3]float32) {
	for i := range c.n * c.n {
		c.pix[3*i], c.pix[3*i+1], c.pix[3*i+2] = col[0], col[1], col[2]
	}
}

func (c *canvas) drawClipart(sc *Scene) {
	n := c.n
	c.fill(sc.st.bgTop)
	c.drawClutter(sc, math.Max(1, float64(n)/64), false, false)
	f := newFrame(sc, n)
	col := rgbf(palette[sc.Spec.Class.Colour])
	sec := secondary(col)
	ow := math.Max(1.3, 0.09*f.r) // bold outline width, pixels
	black := [3]float32{0.05, 0.05, 0.05}
	x0, y0, x1, y1 := f.bbox(n, 1)
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			u, v := f.local(float64(x)+0.5, float64(y)+0.5)
			if u*u+v*v > shapeBound*shapeBound+2/f.r {
				continue
			}
			d := sc.Spec.Class.Shape.sdf(u, v) * f.r
			a := coverage(d)
			if a == 0 {
				continue
			}
			i := y*n + x
			c.blend(i, mixc(col, sec, f.mark(u, v)), a)
			c.blend(i, black, coverage(math.Abs(d+ow/2)-ow/2))
		}
	}
}

func (c *canvas) drawSketch(sc *Scene, r *rand.Rand) {
	n := c.n
	c.noise[0].init(r, 6)
	c.noise[1].init(r, 6)
	// paper with fine grain.
	paper := sc.st.bgTop
	for i := range n * n {
		g := (r.Float32() - 0.5) * 0.03
		c.pix[3*i], c.pix[3*i+1], c.pix[3*i+2] = paper[0]+g, paper[1]+g, paper[2]+g
	}
	c.drawClutter(sc, 0, true, false)
	f := newFrame(sc, n)
	fn := float64(n)
	col := rgbf(palette[sc.Spec.Class.Colour])
	ink := scale(col, 0.85)
	ws := math.Max(1.0, 0.05*f.r)  // outline stroke width, pixels
	wp := math.Max(0.9, 0.035*f.r) // pattern stroke width
	px := f.period * f.r           // pattern period, pixels
	wobble := 0.06 * f.r           // hand tremor amplitude, pixels
	x0, y0, x1, y1 := f.bbox(n, wobble+3)
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			fx, fy := float64(x)+0.5, float64(y)+0.5
			u, v := f.local(fx, fy)
			if u*u+v*v > (shapeBound+0.12)*(shapeBound+0.12) {
				continue
			}
			i := y*n + x
			shape := sc.Spec.Class.Shape
			wob := float64(c.noise[0].at(fx/fn, fy/fn)-0.5) * 2 * wobble
			d := shape.sdf(u, v)*f.r + wob
			// interior marks
			if d < -ws/2 {
				in := clamp01(-d - ws/2)
				switch f.pat {
				case Solid:
					c.blend(i, col, 0.3*in)
				case Striped:
					a, _ := f.patternCoords(u, v)
					t := math.Abs(a-math.Floor(a)-0.5) * px
					c.blend(i, ink, in*coverage(t-2*wp))
				case Dotted:
					a, b := f.patternCoords(u, v)
					row := math.Floor(b)
					if int64(row)&1 == 1 {
						a += 0.5
					}
					dx, dy := a-math.Floor(a)-0.5, b-row-0.5
					c.blend(i, ink, in*coverage((math.Sqrt(dx*dx+dy*dy)-0.22)*px))
				case Checkered:
					e, dark := checker(f.patternCoords(u, v))
					if dark {
						c.blend(i, col, 0.45*in)
					}
					c.blend(i, ink, in*coverage(e*px-wp/2))
				}
			}
			// two overlapping outline strokes, the second fainter.
			c.blend(i, ink, coverage(math.Abs(d)-ws/2))
			wob2 := float64(c.noise[1].at(fx/fn, fy/fn)-0.5) * 2 * wobble
			d2 := shape.sdf(u*1.03+0.02, v*1.03-0.015)*f.r + wob2
			c.blend(i, ink, 0.5*coverage(math.Abs(d2)-ws/3))
		}
	}
}

func (c *canvas) drawPainting(sc *Scene, r *rand.Rand) {
	n := c.n
	fn := float64(n)
	st := &sc.st
	c.noise[0].init(r, 4)
	c.noise[1].init(r, 8)
	// brush texture: bands along the brush direction, each with its own
	// tone, modulated along the stroke.
	var tone, phase [64]float32
	for k := range tone {
		tone[k] = r.Float32()
		phase[k] = r.Float32()
	}
	bcos, bsin := math.Cos(st.brushAngle), math.Sin(st.brushAngle)
	bw := math.Max(1.5, fn/18) // band width, pixels
	for y := range n {
		for x := range n {
			fx, fy := float64(x)+0.5, float64(y)+0.5
			s := (fx*bcos + fy*bsin) / (2.5 * bw)
			t := (-fx*bsin + fy*bcos) / bw
			ft := math.Floor(t)
			k := int(ft) & 63
			a := s + float64(phase[k])
			tri := float32(math.Abs(a-math.Floor(a)-0.5) * 2) // 0..1
			// blend into the next band over the last third of this one.
			b := clamp01((t - ft - 0.67) * 3)
			b = b * b * (3 - 2*b)
			tn := tone[k] + (tone[(k+1)&63]-tone[k])*b
			c.tex[y*n+x] = 0.6*tn + 0.4*tri
		}
	}
	for y := range n {
		for x := range n {
			fx, fy := (float64(x)+0.5)/fn, (float64(y)+0.5)/fn
			i := y*n + x
			bg := mixc(st.bgTop, st.bgBottom, c.noise[0].at(fx, fy))
			bg = scale(bg, 0.88+0.24*c.tex[i])
			c.pix[3*i], c.pix[3*i+1], c.pix[3*i+2] = bg[0], bg[1], bg[2]
		}
	}
	c.drawClutter(sc, 0, false, true)
	f := newFrame(sc, n)
	col := rgbf(palette[sc.Spec.Class.Colour])
	col = mixc(scale(col, st.colourGain), st.colourTint, st.tintAmount)
	sec := secondary(col)
	rag := 0.12 * f.r // edge raggedness, pixels
	x0, y0, x1, y1 := f.bbox(n, rag+1)
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			fx, fy := float64(x)+0.5, float64(y)+0.5
			u, v := f.local(fx, fy)
			if u*u+v*v > (shapeBound+0.15)*(shapeBound+0.15) {
				continue
			}
			i := y*n + x
			nz := float64(c.noise[1].at(fx/fn, fy/fn)) - 0.5
			tx := float64(c.tex[i]) - 0.5
			d := sc.Spec.Class.Shape.sdf(u, v)*f.r + nz*2*rag + tx*0.5*rag
			a := clamp01(0.5 - d/1.5)
			if a == 0 {
				continue
			}
			o := mixc(col, sec, f.mark(u+0.06*nz, v-0.06*tx))
			o = scale(o, 0.86+0.28*c.tex[i])
			c.blend(i, o, a)
		}
	}
	// canvas weave.
	for y := range n {
		wy := float32(y&1)*2 - 1
		for x := range n {
			wx := float32(x&1)*2 - 1
			g := 1 + 0.025*wx*wy
			i := 3 * (y*n + x)
			c.pix[i] *= g
			c.pix[i+1] *= g
			c.pix[i+2] *= g
		}
	}
}

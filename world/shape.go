package world

import "math"

// Shape geometry lives in a unit frame: the object's circumradius is about 1,
// x points right and y points down (image convention). sdf returns the
// signed distance in that frame, negative inside.

// shapeBound is a radius outside of which every shape's sdf is positive.
const shapeBound = 1.05

// polygon is a closed polygon with precomputed edges.
type polygon struct {
	vx, vy []float64 // vertices
	ex, ey []float64 // edge i goes from vertex i-1 to vertex i: v[j]-v[i] with j = i-1
	inv    []float64 // 1 / |e|²
}

func newPolygon(pts [][2]float64) *polygon {
	n := len(pts)
	p := &polygon{vx: make([]float64, n), vy: make([]float64, n), ex: make([]float64, n), ey: make([]float64, n), inv: make([]float64, n)}
	for i, v := range pts {
		p.vx[i], p.vy[i] = v[0], v[1]
	}
	for i := range n {
		j := (i + n - 1) % n
		p.ex[i], p.ey[i] = p.vx[j]-p.vx[i], p.vy[j]-p.vy[i]
		p.inv[i] = 1 / (p.ex[i]*p.ex[i] + p.ey[i]*p.ey[i])
	}
	return p
}

// sdf is the exact signed distance to the polygon (Quilez's sdPolygon).
func (p *polygon) sdf(x, y float64) float64 {
	dx, dy := x-p.vx[0], y-p.vy[0]
	d := dx*dx + dy*dy
	s := 1.0
	n := len(p.vx)
	for i := range n {
		j := i - 1
		if j < 0 {
			j = n - 1
		}
		ex, ey := p.ex[i], p.ey[i]
		wx, wy := x-p.vx[i], y-p.vy[i]
		t := (wx*ex + wy*ey) * p.inv[i]
		if t < 0 {
			t = 0
		} else if t > 1 {
			t = 1
		}
		bx, by := wx-ex*t, wy-ey*t
		if b := bx*bx + by*by; b < d {
			d = b
		}
		c1 := y >= p.vy[i]
		c2 := y < p.vy[j]
		c3 := ex*wy > ey*wx
		if (c1 && c2 && c3) || (!c1 && !c2 && !c3) {
			s = -s
		}
	}
	return s * math.Sqrt(d)
}

func regular(n int, r, phase, dy float64) [][2]float64 {
	pts := make([][2]float64, n)
	for i := range pts {
		a := phase + 2*math.Pi*float64(i)/float64(n)
		pts[i] = [2]float64{r * math.Cos(a), r*math.Sin(a) + dy}
	}
	return pts
}

func starPoints(n int, ro, ri float64) [][2]float64 {
	pts := make([][2]float64, 2*n)
	for i := range pts {
		r := ro
		if i%2 == 1 {
			r = ri
		}
		a := -math.Pi/2 + math.Pi*float64(i)/float64(n)
		pts[i] = [2]float64{r * math.Cos(a), r*math.Sin(a) + 0.08}
	}
	return pts
}

var (
	triPoly  = newPolygon(regular(3, 1.0, -math.Pi/2, 0.2))
	hexPoly  = newPolygon(regular(6, 0.95, -math.Pi/2, 0))
	starPoly = newPolygon(starPoints(5, 1.0, 0.42))
	diaPoly  = newPolygon([][2]float64{{0, -1}, {0.62, 0}, {0, 1}, {-0.62, 0}})
	// heart: two lobes over a downward wedge.
	heartPoly = newPolygon([][2]float64{{-0.9, -0.22}, {0.9, -0.22}, {0, 0.88}})
)

// box is the signed distance to an axis-aligned box of half-size (bx, by).
func box(x, y, bx, by float64) float64 {
	qx, qy := math.Abs(x)-bx, math.Abs(y)-by
	ox, oy := math.Max(qx, 0), math.Max(qy, 0)
	return math.Sqrt(ox*ox+oy*oy) + math.Min(math.Max(qx, qy), 0)
}

func circle(x, y, cx, cy, r float64) float64 {
	dx, dy := x-cx, y-cy
	return math.Sqrt(dx*dx+dy*dy) - r
}

// sdf returns the signed distance from (x, y) to shape s in the unit frame.
func (s Shape) sdf(x, y float64) float64 {
	switch s {
	case 0: // circle
		return math.Sqrt(x*x+y*y) - 0.85
	case 1: // square
		return box(x, y, 0.68, 0.68)
	case 2: // triangle
		return triPoly.sdf(x, y)
	case 3: // star
		return starPoly.sdf(x, y)
	case 4: // hexagon
		return hexPoly.sdf(x, y)
	case 5: // diamond
		return diaPoly.sdf(x, y)
	case 6: // heart
		d := heartPoly.sdf(x, y)
		d = math.Min(d, circle(x, y, -0.44, -0.37, 0.48))
		return math.Min(d, circle(x, y, 0.44, -0.37, 0.48))
	default: // cross
		return math.Min(box(x, y, 0.85, 0.28), box(x, y, 0.28, 0.85))
	}
}

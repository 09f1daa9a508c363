package report

import (
	"fmt"
	"image"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The figures a paper author keeps: learning curves with one panel per
// metric, final bars with their values printed, and a radar chart across
// datasets; every method has the same colour in every figure, the legend
// sits outside the axes, and each figure is written as PNG and SVG.

// palette is the figures' colours in the order methods take them
// (colour-blind friendly, Okabe–Ito order first): a method's colour is the
// one at its position in the methods' order in the table, so no figure
// knows a method by name, and within a run's figures (the table, the curves,
// the bars) a method keeps one colour. Past the end the colours repeat.
var palette = []color.RGBA{
	{0x66, 0x66, 0x66, 0xff}, {0xd5, 0x5e, 0x00, 0xff}, {0x00, 0x72, 0xb2, 0xff}, {0x00, 0x9e, 0x73, 0xff},
	{0xcc, 0x79, 0xa7, 0xff}, {0xe6, 0x9f, 0x00, 0xff}, {0x56, 0xb4, 0xe9, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
	{0x44, 0x2f, 0x99, 0xff}, {0xb2, 0x22, 0x22, 0xff},
	{0x17, 0xbe, 0xcf, 0xff}, {0xbc, 0xbd, 0x22, 0xff}, {0x7f, 0x7f, 0x7f, 0xff}, {0x94, 0x67, 0xbd, 0xff},
	{0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
}

// PositionColor is the colour of the method at position i (from 0) of the
// methods' order in the table.
func PositionColor(i int) color.Color {
	return palette[i%len(palette)]
}

// methodColors gives each method the colour of its position in order; a
// method not in order takes the next position after the last.
type methodColors struct{ order []string }

func (c *methodColors) of(name string) color.Color {
	i := slices.Index(c.order, name)
	if i < 0 {
		c.order = append(c.order, name)
		i = len(c.order) - 1
	}
	return PositionColor(i)
}

// integerTicks marks only whole numbers (rounds).
type integerTicks struct{}

func (integerTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	step := math.Max(1, math.Ceil(span/8))
	var out []plot.Tick
	for v := math.Ceil(lo); v <= hi+1e-9; v += step {
		out = append(out, plot.Tick{Value: v, Label: strconv.Itoa(int(v))})
	}
	return out
}

// figure is a set of panels side by side with a legend to their right.
type figure struct {
	title  string
	panels []*plot.Plot
	legend []legendEntry
	// draw, when set, draws the whole figure itself (radar).
	draw func(dc draw.Canvas)
}

type legendEntry struct {
	name string
	col  color.Color
}

const legendWidth = 3.2 * vg.Centimeter

// render draws the figure on a canvas of width×height points.
func (f figure) render(dc draw.Canvas) {
	if f.draw != nil {
		f.draw(dc)
		return
	}
	sty := plot.New().Title.TextStyle
	top := dc.Max.Y
	if f.title != "" {
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
		dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top - 2}, f.title)
		top -= sty.Height(f.title) + 6
	}
	plots := dc
	plots.Max.Y = top
	plots.Max.X -= legendWidth
	tiles := draw.Tiles{Rows: 1, Cols: len(f.panels), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{f.panels}, tiles, plots)
	for i, p := range f.panels {
		p.Draw(canvases[0][i])
	}
	drawLegend(dc, f.legend, top)
}

// drawLegend lists the entries at the right edge, below y top.
func drawLegend(dc draw.Canvas, entries []legendEntry, top vg.Length) {
	sty := plot.New().Legend.TextStyle
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YCenter
	x := dc.Max.X - legendWidth + vg.Millimeter*3
	y := top - vg.Millimeter*8
	for _, e := range entries {
		ls := draw.LineStyle{Color: e.col, Width: vg.Points(3)}
		dc.StrokeLine2(ls, x, y, x+vg.Millimeter*6, y)
		dc.FillText(sty, vg.Point{X: x + vg.Millimeter*8, Y: y}, e.name)
		y -= sty.Height(e.name) + vg.Millimeter*2
	}
}

// write renders the figure into base+".png" (width×height pixels) and
// base+".svg", atomically.
func (f figure) write(base string, width, height int) (err error) {
	if err := checkSize(width, height); err != nil {
		return fmt.Errorf("plot %s: %w", base, err)
	}
	defer func() {
		// gonum/plot panics on some degenerate inputs; report them as errors.
		if r := recover(); r != nil {
			err = fmt.Errorf("plot %s: %v", base, r)
		}
	}()
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	c := vgimg.NewWith(vgimg.UseImage(img))
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	f.render(draw.Crop(dc, vg.Millimeter*2, -vg.Millimeter*2, vg.Millimeter*2, -vg.Millimeter*2))
	if err := writeFileAtomic(base+".png", func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
		return err
	}); err != nil {
		return err
	}
	s := vgsvg.New(vg.Length(width)*0.75, vg.Length(height)*0.75)
	sc := draw.New(s)
	f.render(draw.Crop(sc, vg.Millimeter*2, -vg.Millimeter*2, vg.Millimeter*2, -vg.Millimeter*2))
	return writeFileAtomic(base+".svg", func(w io.Writer) error {
		_, err := s.WriteTo(w)
		return err
	})
}

// WriteCurves draws the mean client metrics of records against the round:
// one panel per metric, one line per method, into base.png and base.svg.
// A method evaluated once (zero-shot) is drawn as a dashed reference line
// across the rounds. order is the methods' order in the table, which gives
// their colours (nil: the order in which they first appear in records).
func WriteCurves(base, title string, records []RoundRecord, metrics []string, order []string, width, height int) error {
	var methods []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range records {
		if !slices.Contains(methods, r.Method) {
			methods = append(methods, r.Method)
		}
		lo, hi = min(lo, float64(r.Round)), max(hi, float64(r.Round))
	}
	if len(methods) == 0 || len(metrics) == 0 {
		return fmt.Errorf("plot %s: no records or metrics", base)
	}
	colors := &methodColors{order: slices.Clone(order)}
	f := figure{title: title}
	for _, k := range metrics {
		p := plot.New()
		p.Title.Text = ColumnTitle(k)
		p.X.Label.Text = "Round"
		p.Y.Label.Text = "%"
		p.X.Tick.Marker = integerTicks{}
		p.Add(plotter.NewGrid())
		for _, m := range methods {
			var xys plotter.XYs
			for _, r := range records {
				if v, ok := r.Mean[k]; ok && r.Method == m && finite(v) {
					xys = append(xys, plotter.XY{X: float64(r.Round), Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			col := colors.of(m)
			if len(xys) == 1 && hi > lo {
				ref := plotter.XYs{{X: lo, Y: xys[0].Y}, {X: hi, Y: xys[0].Y}}
				l, err := plotter.NewLine(ref)
				if err != nil {
					return fmt.Errorf("plot %s: %w", base, err)
				}
				l.Color, l.Width, l.Dashes = col, vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(3)}
				p.Add(l)
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return fmt.Errorf("plot %s: %w", base, err)
			}
			l.Color, l.Width = col, vg.Points(1.5)
			pts.Color = col
			p.Add(l, pts)
		}
		if hi > lo {
			p.X.Min, p.X.Max = lo, hi
		}
		f.panels = append(f.panels, p)
	}
	for _, m := range methods {
		f.legend = append(f.legend, legendEntry{m, colors.of(m)})
	}
	return f.write(base, width, height)
}

// WriteBars draws the summary's final metrics: one panel per metric, one
// bar per method in its colour, the value printed on each bar.
func WriteBars(base, title string, s *Summary, width, height int) error {
	if len(s.Methods) == 0 {
		return fmt.Errorf("plot %s: no methods", base)
	}
	f := figure{title: title}
	for _, k := range s.Columns() {
		p := plot.New()
		p.Title.Text = ColumnTitle(k)
		p.Y.Label.Text = "%"
		p.Add(plotter.NewGrid())
		var names []string
		ymax := 0.0
		for i, r := range s.Methods {
			v, ok := r.Metrics[k]
			if !ok || !finite(v) {
				v = 0
			}
			ymax = max(ymax, v)
			bars, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(18))
			if err != nil {
				return fmt.Errorf("plot %s: %w", base, err)
			}
			bars.Color = PositionColor(i)
			bars.LineStyle.Width = 0
			bars.XMin = float64(i)
			p.Add(bars)
			lab, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: float64(i), Y: v}},
				Labels: []string{strconv.FormatFloat(v, 'f', 1, 64)}})
			if err != nil {
				return fmt.Errorf("plot %s: %w", base, err)
			}
			for j := range lab.TextStyle {
				lab.TextStyle[j].XAlign, lab.TextStyle[j].YAlign = draw.XCenter, draw.YBottom
			}
			p.Add(lab)
			names = append(names, "")
		}
		p.NominalX(names...)
		p.X.Min, p.X.Max = -0.6, float64(len(s.Methods))-0.4
		p.Y.Min, p.Y.Max = 0, max(ymax*1.12, 1)
		f.panels = append(f.panels, p)
	}
	for i, r := range s.Methods {
		f.legend = append(f.legend, legendEntry{r.Method, PositionColor(i)})
	}
	return f.write(base, width, height)
}

// WriteRadar draws one metric of several datasets' summaries as a radar
// chart: one axis per dataset (0–100 %), one polygon per method present in
// every summary.
func WriteRadar(base, title, metric string, datasets []string, summaries []*Summary, width, height int) error {
	if len(datasets) != len(summaries) || len(datasets) < 3 {
		return fmt.Errorf("plot %s: a radar chart needs three datasets or more, with one summary each (got %d, %d)", base, len(datasets), len(summaries))
	}
	var methods []string
	for _, r := range summaries[0].Methods {
		all := true
		for _, s := range summaries[1:] {
			if _, ok := s.Get(r.Method); !ok {
				all = false
			}
		}
		if all {
			methods = append(methods, r.Method)
		}
	}
	colors := &methodColors{}
	for _, r := range summaries[0].Methods {
		colors.of(r.Method)
	}
	f := figure{title: title}
	for _, m := range methods {
		f.legend = append(f.legend, legendEntry{m, colors.of(m)})
	}
	f.draw = func(dc draw.Canvas) {
		sty := plot.New().Title.TextStyle
		top := dc.Max.Y
		if title != "" {
			sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
			dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X - legendWidth) / 2, Y: top - 2}, title+" ("+ColumnTitle(metric)+")")
			top -= sty.Height(title) + 6
		}
		lab := plot.New().X.Tick.Label
		cx, cy := (dc.Min.X+dc.Max.X-legendWidth)/2, (dc.Min.Y+top)/2
		r := min(dc.Max.X-legendWidth-dc.Min.X, top-dc.Min.Y)/2 - vg.Centimeter*1.2
		n := len(datasets)
		at := func(i int, frac float64) vg.Point {
			a := math.Pi/2 - 2*math.Pi*float64(i)/float64(n)
			return vg.Point{X: cx + vg.Length(frac*math.Cos(a))*r, Y: cy + vg.Length(frac*math.Sin(a))*r}
		}
		grid := draw.LineStyle{Color: color.Gray{Y: 200}, Width: vg.Points(0.5)}
		for _, ring := range []float64{0.25, 0.5, 0.75, 1} {
			var pts []vg.Point
			for i := 0; i <= n; i++ {
				pts = append(pts, at(i%n, ring))
			}
			dc.StrokeLines(grid, pts)
		}
		for i, d := range datasets {
			dc.StrokeLine2(grid, cx, cy, at(i, 1).X, at(i, 1).Y)
			p := at(i, 1.12)
			lab.XAlign, lab.YAlign = draw.XCenter, draw.YCenter
			dc.FillText(lab, p, d)
		}
		for _, m := range methods {
			var pts []vg.Point
			for i := 0; i <= n; i++ {
				v, _ := summaries[i%n].Get(m)
				pts = append(pts, at(i%n, math.Max(0, math.Min(1, v[metric]/100))))
			}
			dc.StrokeLines(draw.LineStyle{Color: colors.of(m), Width: vg.Points(2)}, pts)
		}
		drawLegend(dc, f.legend, top)
	}
	return f.write(base, width, height)
}

// RunFigures writes a run's figures into dir: curves.{png,svg} (one panel
// per metric of the summary, per round) and final.{png,svg} (the final
// metrics), titled with title (the dataset and protocol). It returns the
// images for report.md.
func RunFigures(dir, title string, records []RoundRecord, s *Summary) ([]Image, error) {
	metrics := s.Columns()
	var order []string
	for _, r := range s.Methods {
		order = append(order, r.Method)
	}
	if err := WriteCurves(filepath.Join(dir, "curves"), title, records, metrics, order, 360*len(metrics)+200, 420); err != nil {
		return nil, err
	}
	if err := WriteBars(filepath.Join(dir, "final"), title+" — final round", s, 300*len(metrics)+200, 420); err != nil {
		return nil, err
	}
	return []Image{{Caption: "Mean client accuracy per round", Path: "curves.png"}, {Caption: "Final accuracy", Path: "final.png"}}, nil
}

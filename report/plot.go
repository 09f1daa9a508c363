package report

import (
	"fmt"
	"image"
	"io"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/eval"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// maxPixels bounds the width and height of a plot image.
const maxPixels = 10000

// Series is one line of a LineChart: Y[i] at X[i].
type Series struct {
	Name string
	X, Y []float64
}

// LineChart is a chart of one or more lines, e.g. learning curves (metric
// vs round).
type LineChart struct {
	Title, XLabel, YLabel string
	Series                []Series
}

// LearningCurves returns the chart of the mean metrics of records against
// the round: one line per (method, metric). With no metrics given it plots
// every mean metric except loss. Lines are named "method metric", or just the
// metric title (method) when there is one method (metric).
func LearningCurves(records []RoundRecord, metrics ...string) LineChart {
	var methods []string
	var keys []string
	for _, r := range records {
		if !slices.Contains(methods, r.Method) {
			methods = append(methods, r.Method)
		}
		keys = append(keys, r.Mean.Keys()...)
	}
	if len(metrics) == 0 {
		for _, k := range eval.MetricOrder(keys) {
			if k != "loss" {
				metrics = append(metrics, k)
			}
		}
	}
	c := LineChart{Title: "Learning curves", XLabel: "Round", YLabel: "Accuracy (%)"}
	if len(metrics) == 1 {
		c.YLabel = ColumnTitle(metrics[0])
	}
	for _, m := range methods {
		for _, k := range metrics {
			s := Series{}
			switch {
			case len(methods) == 1:
				s.Name = ColumnTitle(k)
			case len(metrics) == 1:
				s.Name = m
			default:
				s.Name = m + " " + ColumnTitle(k)
			}
			for _, r := range records {
				if v, ok := r.Mean[k]; ok && r.Method == m {
					s.X = append(s.X, float64(r.Round))
					s.Y = append(s.Y, v)
				}
			}
			if len(s.X) > 0 {
				c.Series = append(c.Series, s)
			}
		}
	}
	return c
}

// WritePNG draws the chart into a width×height pixel PNG at path,
// atomically. Points with a NaN or infinite coordinate are skipped.
func (c LineChart) WritePNG(path string, width, height int) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	ymin, ymax := math.Inf(1), math.Inf(-1)
	n := 0
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot %s: series %q: %d x values, %d y values", path, s.Name, len(s.X), len(s.Y))
		}
		var xys plotter.XYs
		for j := range s.X {
			if finite(s.X[j]) && finite(s.Y[j]) {
				xys = append(xys, plotter.XY{X: s.X[j], Y: s.Y[j]})
				ymin, ymax = min(ymin, s.Y[j]), max(ymax, s.Y[j])
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: series %q: %w", path, s.Name, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		line.Dashes = plotutil.Dashes(i / 7)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
		n++
	}
	p.Legend.Top = true
	if n > 0 {
		// Head room above the data for the legend.
		span := max(ymax-ymin, math.Abs(ymax)*0.1, 1e-9)
		p.Y.Min = ymin - 0.03*span
		p.Y.Max = ymax + span*legendRoom(n, height)
	}
	return savePNG(p, path, width, height)
}

// BarSeries is one colour of a BarChart: Values[i] belongs to group i.
type BarSeries struct {
	Name   string
	Values []float64
}

// BarChart is a grouped bar chart, e.g. the final metrics per method:
// groups on the x axis, one bar per series within each group.
type BarChart struct {
	Title, YLabel string
	Groups        []string
	Bars          []BarSeries
}

// BarChart returns the final metrics of the summary as a bar chart: one
// group per method, one bar per metric column.
func (s *Summary) BarChart(title string) BarChart {
	c := BarChart{Title: title, YLabel: "Accuracy (%)"}
	for _, r := range s.Methods {
		c.Groups = append(c.Groups, r.Method)
	}
	for _, k := range s.Columns() {
		b := BarSeries{Name: ColumnTitle(k)}
		for _, r := range s.Methods {
			v, ok := r.Metrics[k]
			if !ok {
				v = math.NaN()
			}
			b.Values = append(b.Values, v)
		}
		c.Bars = append(c.Bars, b)
	}
	return c
}

// WritePNG draws the chart into a width×height pixel PNG at path,
// atomically. NaN or infinite values (missing metrics) draw no bar.
func (c BarChart) WritePNG(path string, width, height int) error {
	if len(c.Groups) == 0 || len(c.Bars) == 0 {
		return fmt.Errorf("plot %s: bar chart without groups or bars", path)
	}
	if err := checkSize(width, height); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	p := plot.New()
	p.Title.Text = c.Title
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	// Bars share about 80% of each group's slot of the (roughly 85% wide)
	// plotting area; widths are in points (1 px = 0.75 pt at 96 dpi).
	area := vg.Length(float64(width)*0.75) * 0.85
	bw := area / vg.Length(len(c.Groups)) * 0.8 / vg.Length(len(c.Bars))
	ymax := 0.0
	for i, b := range c.Bars {
		if len(b.Values) != len(c.Groups) {
			return fmt.Errorf("plot %s: bars %q: %d values for %d groups", path, b.Name, len(b.Values), len(c.Groups))
		}
		vals := make(plotter.Values, len(b.Values))
		for j, v := range b.Values {
			if finite(v) {
				vals[j] = v
				ymax = max(ymax, v)
			}
		}
		bars, err := plotter.NewBarChart(vals, bw)
		if err != nil {
			return fmt.Errorf("plot %s: bars %q: %w", path, b.Name, err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = bw * (vg.Length(i) - vg.Length(len(c.Bars)-1)/2)
		p.Add(bars)
		p.Legend.Add(b.Name, bars)
	}
	p.NominalX(c.Groups...)
	p.X.Min, p.X.Max = -0.5, float64(len(c.Groups))-0.5
	p.Legend.Top = true
	// Head room for the legend above the tallest bar.
	if ymax > 0 {
		p.Y.Min = 0
		p.Y.Max = ymax * (1.03 + legendRoom(len(c.Bars), height))
	}
	return savePNG(p, path, width, height)
}

// legendRoom returns how far, as a fraction of the data's span, the y axis
// must extend above the data so that a top legend of n entries clears it in
// an image height pixels tall.
func legendRoom(n, height int) float64 {
	entry := 14.0                           // points per legend entry
	plotH := float64(height)*0.75*0.8 - 8.0 // points of plotting area, roughly
	f := min(float64(n)*entry/max(plotH, 1), 0.6)
	return 0.03 + f/(1-f)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func checkSize(width, height int) error {
	if width <= 0 || height <= 0 || width > maxPixels || height > maxPixels {
		return fmt.Errorf("image size %dx%d out of range 1..%d", width, height, maxPixels)
	}
	return nil
}

// savePNG renders p into an image of exactly width×height pixels and writes
// it to path atomically.
func savePNG(p *plot.Plot, path string, width, height int) (err error) {
	if err := checkSize(width, height); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	defer func() {
		// gonum/plot panics on some degenerate inputs; report them as errors.
		if r := recover(); r != nil {
			err = fmt.Errorf("plot %s: %v", path, r)
		}
	}()
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	canvas := vgimg.NewWith(vgimg.UseImage(img))
	// A small margin keeps the title, legend and last tick label off the edge.
	const margin = 6 * vg.Millimeter / 4
	p.Draw(draw.Crop(draw.New(canvas), margin, -margin, margin, -margin))
	if got := canvas.Image().Bounds(); got.Dx() != width || got.Dy() != height {
		return fmt.Errorf("plot %s: rendered %dx%d, want %dx%d", path, got.Dx(), got.Dy(), width, height)
	}
	return writeFileAtomic(path, func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: canvas}.WriteTo(w)
		return err
	})
}

package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func numCPU() int { return runtime.NumCPU() }

// loadAvg is the first three fields of /proc/loadavg ("" when unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// WriteTable writes the projection as a markdown table, then the measured
// rounds it comes from.
func (r *PaperScaleResult) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "GEMM %s (%s, %d threads), %d CPUs; prefix cache %s, RAM budget %d MiB\n\n",
		r.Backend, r.Kernel, r.Threads, r.CPUs, r.CacheDType, r.MemoryBudgetMiB)
	b.WriteString("| preset (dataset, method) | clients (per round) × rounds × seeds | training images round 0 / later rounds | evaluations × images | cache fill | round (training) | evaluation | **projected hours** | cache GiB (RAM / spilled) | **peak RAM GiB** |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Presets {
		q := p.Projection
		fmt.Fprintf(&b, "| %s (%s, %s) | %d (%d) × %d × %d | %d / %d | %d × %d | %.0f s | %.0f s | %.0f s | **%.1f** | %.1f (%.1f / %.1f) | **%.1f** |\n",
			p.Preset, p.Dataset, p.Method, q.Clients, q.PerRound, q.Rounds, q.Seeds, q.TrainImagesRound0, q.TrainImagesPerRound,
			q.Evaluations, q.EvalImagesPerEval, q.FillSeconds, q.RoundSeconds, q.EvalSeconds, q.Hours,
			q.CacheGiB, q.CacheRAMGiB, q.SpillGiB, q.PeakGiB)
	}
	b.WriteString("\nMeasured rounds (ViT-B/16 shapes, random weights, generated images of the real class count; every client trained and evaluated every round):\n\n")
	b.WriteString("| preset | scale, classes, clients | training / evaluation images per round | cache fill (records) | rounds: total s (training, evaluation) | s per training / evaluation image | peak RSS | spilled round vs in RAM | load before → after |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Presets {
		m := p.Measured
		var rs []string
		for _, t := range m.Rounds {
			rs = append(rs, fmt.Sprintf("%.1f (%.1f, %.1f)", t.Seconds, t.Fit, t.Eval))
		}
		spill := "not measured"
		if m.SpillFactor > 0 {
			spill = fmt.Sprintf("%.1f s vs %.1f s (×%.2f)", m.SpilledSecondsPerRound, m.SecondsPerRound, m.SpillFactor)
		}
		fmt.Fprintf(&b, "| %s | %.3g, %d, %d | %d / %d | %.1f s (%d) | %s | %.3f / %.3f | %.0f MiB | %s | %s → %s |\n",
			p.Preset, m.Scale, m.Classes, m.Clients, m.TrainImages, m.EvalImages, m.CacheFillSeconds, m.CachedRecords,
			strings.Join(rs, "; "), m.TrainSecondsPerImg, m.EvalSecondsPerImg, m.PeakRSSMiB, spill, m.LoadBefore, m.LoadAfter)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteFiles writes paperscale.json, paperscale.md and paperscale.png
// into dir.
func (r *PaperScaleResult) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "paperscale.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	f, err := os.Create(filepath.Join(dir, "paperscale.md"))
	if err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	if err := r.WriteTable(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return r.WritePNG(filepath.Join(dir, "paperscale.png"))
}

// WritePNG plots the projected hours against clients, shots and rounds
// (one panel each, one line per preset, the other settings the preset's).
func (r *PaperScaleResult) WritePNG(path string) error {
	axes := []struct{ axis, label string }{{"clients", "clients"}, {"shots", "shots per class"}, {"rounds", "rounds"}}
	palette := []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{214, 39, 40, 255}, color.RGBA{44, 160, 44, 255}, color.RGBA{148, 103, 189, 255}}
	row := make([]*plot.Plot, len(axes))
	for j, a := range axes {
		p := plot.New()
		p.Title.Text = "projected hours vs " + a.label
		p.X.Label.Text = a.label
		p.Y.Label.Text = "hours (all seeds)"
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
		p.Legend.Top, p.Legend.Left = true, true
		for i, ps := range r.Presets {
			var xy plotter.XYs
			for _, s := range ps.Scaling {
				if s.Axis == a.axis && s.X > 0 {
					xy = append(xy, plotter.XY{X: float64(s.X), Y: s.Hours})
				}
			}
			if len(xy) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			c := palette[i%len(palette)]
			l.Color, pts.Color = c, c
			pts.Shape = draw.CircleGlyph{}
			p.Add(l, pts)
			p.Legend.Add(ps.Preset+" ("+ps.Dataset+")", l, pts)
		}
		row[j] = p
	}
	const w, h = 15 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(axes), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for j, p := range row {
		p.Draw(canvases[0][j])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

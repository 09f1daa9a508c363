package main

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestFedCLIPStepRoundCommands runs `pfedmma step` and `pfedmma round
// --method fedclip` on testdata/fedclip and compares every tensor the
// reference file holds with the fixtures' scale-relative tolerance (rel =
// max|Δ|/max|ref| ≤ 1e-4; the forward ≤ 1e-5), and the update p − init of
// every step1.* / client<i>.trained.* / global.* tensor.
func TestFedCLIPStepRoundCommands(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	const td = "../../testdata/fedclip/"
	init := fedclipRead(t, td+"init.safetensors")
	for _, kind := range []string{"step", "round"} {
		t.Run(kind, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			rootCmd.SetOut(&bytes.Buffer{})
			rootCmd.SetArgs([]string{kind, "--method", "fedclip", "--model", "../../testdata/clip-tiny/openai.safetensors",
				"--params", td + "init.safetensors", "--batch", td + kind + ".safetensors", "--out", out})
			resetCommand(t, kind)
			if err := rootCmd.Execute(); err != nil {
				t.Fatal(err)
			}
			got, want := fedclipRead(t, out), fedclipRead(t, td+kind+".safetensors")
			checked := 0
			for name, w := range want {
				if name == "images" || strings.HasSuffix(name, ".images") {
					continue // inputs
				}
				g, ok := got[name]
				if !ok {
					t.Errorf("%s: no %s in the output", kind, name)
					continue
				}
				tol := 1e-4
				if !strings.Contains(name, "grad.") && !strings.Contains(name, "img_adap") {
					tol = 1e-5
				}
				fedclipClose(t, name, g.Data, w.Data, tol)
				if i := strings.Index(name, "img_adap."); i >= 0 && !strings.HasPrefix(name, "grad.") {
					p := init[name[i:]]
					du, dw := make([]float32, len(p.Data)), make([]float32, len(p.Data))
					for k := range p.Data {
						du[k], dw[k] = g.Data[k]-p.Data[k], w.Data[k]-p.Data[k]
					}
					fedclipClose(t, name+" (update)", du, dw, tol)
				}
				checked++
			}
			if min := map[string]int{"step": 15, "round": 14}[kind]; checked < min {
				t.Errorf("only %d outputs compared, want ≥ %d", checked, min)
			}
		})
	}
}

func fedclipRead(t *testing.T, path string) tensor.Named {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := tensor.Named{}
	for _, name := range f.Names() {
		if dt, _, _ := f.Info(name); dt != "F32" {
			continue
		}
		v, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = v
	}
	return out
}

func fedclipClose(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	var maxRef, maxD float64
	for i := range want {
		maxRef = math.Max(maxRef, math.Abs(float64(want[i])))
		maxD = math.Max(maxD, math.Abs(float64(got[i]-want[i])))
	}
	if !(maxD <= tol*maxRef) {
		t.Errorf("%s: rel error %.3g > %.3g (max|Δ| %.3g, max|ref| %.3g)", name, maxD/maxRef, tol, maxD, maxRef)
	}
}

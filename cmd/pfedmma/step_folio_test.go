package main

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
)

// TestStepRoundPromptFolioFedPHA runs `pfedmma step` and `pfedmma round`
// on every promptfolio and fedpha fixture and compares every output the
// reference file holds with the fixtures' scale-relative tolerances (rel =
// max|Δ|/max|ref|: forward 1e-5; gradients, steps, round tensors 1e-4), and
// the updates p − init of every step and round tensor.
func TestStepRoundPromptFolioFedPHA(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	const td = "../../testdata/"
	cases := []fixtureCase{
		{"step", "promptfolio", "promptfolio/init", []string{"promptfolio/step"}, nil, "promptfolio/step"},
		{"step", "promptfolio", "promptfolio/init", []string{"promptfolio/step_theta0"}, nil, "promptfolio/step_theta0"},
		{"step", "promptfolio", "promptfolio/init", []string{"promptfolio/step_theta1"}, nil, "promptfolio/step_theta1"},
		{"round", "promptfolio", "promptfolio/init", []string{"promptfolio/round"}, nil, "promptfolio/round"},
		{"step", "fedpha", "fedpha/init", []string{"fedpha/step"}, nil, "fedpha/step"},
		{"step", "fedpha", "fedpha/init_far", []string{"fedpha/step_far"}, nil, "fedpha/step_far"},
		{"round", "fedpha", "fedpha/init", []string{"fedpha/round"}, nil, "fedpha/round"},
	}
	for _, c := range cases {
		t.Run(c.kind+"/"+c.want, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			args := []string{c.kind, "--method", c.method, "--model", td + "clip-tiny/openai.safetensors",
				"--params", td + c.params + ".safetensors", "--out", out}
			for _, b := range c.batches {
				args = append(args, "--batch", td+b+".safetensors")
			}
			var buf bytes.Buffer
			rootCmd.SetOut(&buf)
			rootCmd.SetArgs(args)
			resetCommand(t, c.kind)
			if err := rootCmd.Execute(); err != nil {
				t.Fatal(err)
			}
			got, err := safetensors.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			want, err := safetensors.Open(td + c.want + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			init, err := safetensors.Open(td + c.params + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			defer init.Close()
			checked := 0
			for _, name := range want.Names() {
				if dt, _, _ := want.Info(name); dt != "F32" {
					continue
				}
				input := strings.HasSuffix(name, "images") || name == "image_features"
				if _, _, ok := got.Info(name); !ok {
					if input {
						continue
					}
					t.Errorf("%s: missing from the output", name)
					continue
				}
				g, err := got.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				w, err := want.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				tol := 1e-5
				param := ""
				for _, p := range []string{"grad.", "step1.", ".trained.", ".next.", "global."} {
					if i := strings.Index(name, p); i >= 0 {
						tol, param = 1e-4, name[i+len(p):]
					}
				}
				if strings.HasSuffix(name, "batch_losses") {
					tol = 1e-4
				}
				cliClose(t, name, g.Data, w.Data, tol)
				if _, _, ok := init.Info(param); ok && !strings.HasPrefix(name, "grad.") {
					p0, err := init.Float32(param)
					if err != nil {
						t.Fatal(err)
					}
					if len(p0.Data) == len(w.Data) {
						du, dw := make([]float32, len(w.Data)), make([]float32, len(w.Data))
						for i := range w.Data {
							du[i], dw[i] = g.Data[i]-p0.Data[i], w.Data[i]-p0.Data[i]
						}
						cliClose(t, name+" (update)", du, dw, 1e-4)
					}
				}
				checked++
			}
			if checked < 5 {
				t.Fatalf("only %d outputs compared", checked)
			}
		})
	}
}

func cliClose(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var maxRef, maxD float64
	for i := range want {
		maxRef = math.Max(maxRef, math.Abs(float64(want[i])))
		maxD = math.Max(maxD, math.Abs(float64(got[i]-want[i])))
	}
	if !(maxD <= tol*maxRef) {
		t.Errorf("%s: rel error %.3g > %.3g", name, maxD/maxRef, tol)
	}
}

package main

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
)

// TestFedTPGStepRoundCommands runs `pfedmma step` and `pfedmma round` for
// fedtpg on every file of testdata/fedtpg and compares every output the
// reference holds with the fixtures README's tolerances (forward 1e-5,
// gradients and parameters 1e-4, scale-relative) and the parameters'
// updates p − init (1e-4 of the largest update plus one float32 spacing of
// max|p| per SGD step).
func TestFedTPGStepRoundCommands(t *testing.T) {
	checkFixtureCommands(t, "fedtpg", []fixtureCommand{
		{"step", "init", "step"}, {"step", "init_rand", "step_rand"}, {"round", "init", "round"},
	}, 40, 17)
}

// fixtureCommand is one `pfedmma step` or `round` call on a method's
// fixture files: testdata/<method>/<params>.safetensors and <batch>.safetensors.
type fixtureCommand struct{ kind, params, batch string }

// checkFixtureCommands runs each command for method and compares every F32
// output the reference batch file holds with the fixtures README's
// tolerances and the parameters' updates p − init; at least minChecked
// outputs and minUpdates updates must be compared in each file.
func checkFixtureCommands(t *testing.T, method string, cases []fixtureCommand, minChecked, minUpdates int) {
	t.Helper()
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	td := "../../testdata/" + method + "/"
	for _, c := range cases {
		t.Run(c.batch, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			rootCmd.SetOut(&bytes.Buffer{})
			rootCmd.SetArgs([]string{c.kind, "--method", method, "--model", "../../testdata/clip-tiny/openai.safetensors",
				"--params", td + c.params + ".safetensors", "--batch", td + c.batch + ".safetensors", "--out", out})
			resetCommand(t, c.kind)
			if err := rootCmd.Execute(); err != nil {
				t.Fatal(err)
			}
			got, err := safetensors.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			want, err := safetensors.Open(td + c.batch + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			init, err := safetensors.Open(td + c.params + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			defer init.Close()
			checked, updates := 0, 0
			for _, name := range want.Names() {
				if dt, _, _ := want.Info(name); dt != "F32" || name == "images" || strings.HasSuffix(name, ".images") || strings.HasSuffix(name, "batch_losses") {
					continue
				}
				w, err := want.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, ok := got.Info(name); !ok {
					t.Errorf("%s: not produced", name)
					continue
				}
				g, err := got.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				if len(g.Data) != len(w.Data) {
					t.Fatalf("%s: %d values, want %d", name, len(g.Data), len(w.Data))
				}
				tol := 1e-5
				param, steps := "", 0
				switch {
				case strings.HasPrefix(name, "grad."), strings.Contains(name, ".momentum."):
					tol = 1e-4
				case strings.HasPrefix(name, "step1."):
					tol, param, steps = 1e-4, strings.TrimPrefix(name, "step1."), 1
				case strings.HasPrefix(name, "global."):
					tol, param, steps = 1e-4, strings.TrimPrefix(name, "global."), 3
				case strings.Contains(name, ".trained."):
					_, param, _ = strings.Cut(name, ".trained.")
					tol, steps = 1e-4, map[bool]int{true: 2, false: 1}[strings.HasPrefix(name, "client0.")]
				}
				var maxRef, maxD float64
				for i := range w.Data {
					maxRef = math.Max(maxRef, math.Abs(float64(w.Data[i])))
					maxD = math.Max(maxD, math.Abs(float64(g.Data[i]-w.Data[i])))
				}
				if !(maxD <= tol*maxRef) {
					t.Errorf("%s: rel error %.3g > %.3g", name, maxD/maxRef, tol)
				}
				checked++
				if param == "" {
					continue
				}
				p0, err := init.Float32(param)
				if err != nil {
					t.Fatal(err)
				}
				var maxU, maxUD float64
				var maxP float32
				for i := range w.Data {
					u := float64(w.Data[i] - p0.Data[i])
					maxU = math.Max(maxU, math.Abs(u))
					maxUD = math.Max(maxUD, math.Abs(float64(g.Data[i]-p0.Data[i])-u))
					maxP = max(maxP, float32(math.Abs(float64(w.Data[i]))))
				}
				spacing := float64(math.Nextafter32(maxP, float32(math.Inf(1))) - maxP)
				if lim := 1e-4*maxU + float64(steps)*spacing; !(maxUD <= lim) || maxU == 0 {
					t.Errorf("%s update: max|Δ| %.3g > %.3g (max|update| %.3g)", name, maxUD, lim, maxU)
				}
				updates++
			}
			if checked < minChecked || updates < minUpdates {
				t.Fatalf("only %d outputs and %d updates compared", checked, updates)
			}
		})
	}
}

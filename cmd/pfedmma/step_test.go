package main

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
)

// fixtureCase is one `pfedmma step` or `round` invocation on a reference
// fixture and the file holding the reference's outputs.
type fixtureCase struct {
	kind, method, params string
	batches              []string
	sets                 []string
	want                 string
}

var fixtureCases = []fixtureCase{
	{"step", "pfedmma", "mma-l2/adapters_init", []string{"mma-l2/step"}, nil, "mma-l2/step"},
	{"step", "pfedmma", "mma-l0/adapters_init", []string{"mma-l0/step"}, nil, "mma-l0/step"},
	{"round", "pfedmma", "mma-l2/adapters_init", []string{"mma-l2/round", "mma-l2/step"}, nil, "mma-l2/round"},
	{"round", "pfedmma", "mma-l0/adapters_init", []string{"mma-l0/round"}, []string{"adapter_scale=0.005"}, "mma-l0/round"},
}

// TestStepRoundCommands runs the fixture contract through the CLI and
// compares every output the reference file also holds (max |Δ| ≤
// 1e-4·(1 + max|ref|) per tensor; the methods' own tests apply the fixtures'
// finer tolerances).
func TestStepRoundCommands(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	const td = "../../testdata/"
	for _, c := range fixtureCases {
		t.Run(c.kind+"/"+c.want, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			args := []string{c.kind, "--method", c.method, "--model", td + "clip-tiny/openai.safetensors",
				"--params", td + c.params + ".safetensors", "--out", out}
			for _, b := range c.batches {
				args = append(args, "--batch", td+b+".safetensors")
			}
			for _, s := range c.sets {
				args = append(args, "--set", s)
			}
			if strings.HasSuffix(c.want, "mma-l0/round") {
				// tokens live in the step file
				args = append(args, "--batch", td+"mma-l0/step.safetensors")
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
			checked := 0
			for _, name := range got.Names() {
				if _, _, ok := want.Info(name); !ok {
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
				if len(g.Data) != len(w.Data) {
					t.Fatalf("%s: %d values, want %d", name, len(g.Data), len(w.Data))
				}
				var maxRef, maxD float64
				for i := range w.Data {
					maxRef = math.Max(maxRef, math.Abs(float64(w.Data[i])))
					maxD = math.Max(maxD, math.Abs(float64(g.Data[i]-w.Data[i])))
				}
				if !(maxD <= 1e-4*(1+maxRef)) {
					t.Errorf("%s: max |Δ| %.3g (max |ref| %.3g)", name, maxD, maxRef)
				}
				checked++
			}
			if checked < 10 {
				t.Fatalf("only %d outputs compared", checked)
			}
		})
	}
	rootCmd.SetArgs([]string{"step", "--method", "nosuch", "--params", "x", "--batch", "y", "--out", "z"})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "available: ") {
		t.Errorf("unknown method: %v", err)
	}
}

// resetCommand clears the flags a previous Execute of the named command
// set (pflag appends to repeated flags across parses).
func resetCommand(t *testing.T, name string) {
	t.Helper()
	cmd, _, err := rootCmd.Find([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	resetFlags(cmd)
}

func TestVersionCommand(t *testing.T) {
	var buf bytes.Buffer
	rootCmd.SetOut(&buf)
	rootCmd.SetArgs([]string{"version"})
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"float32 GEMM", "bfloat16 GEMM", "JPEG decoder"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("version lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestRunModelEmbedded runs a paper preset on the embedded model with one
// flag: pFedMMA's start block 10 becomes the model's last block.
func TestRunModelEmbedded(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "run") })
	resetCommand(t, "run")
	var buf bytes.Buffer
	rootCmd.SetOut(&buf)
	rootCmd.SetArgs([]string{"run", "--quiet", "--preset", "paper-base2novel", "--model", "embedded", "--out", filepath.Join(t.TempDir(), "r"),
		"--set", "dataset.name=world", "--set", "federation.rounds=1", "--set", "federation.clients=2", "--set", "seeds=[]",
		"--set", "dataset.num_classes=8", "--set", "methods=[pfedmma]"})
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "pfedmma") {
		t.Fatalf("output:\n%s", buf.String())
	}
}

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

// stFile is a safetensors file's tensors and metadata, to edit in tests.
type stFile struct {
	f32  tensor.Named
	ints map[string]safetensors.Int64Tensor
	meta map[string]string
}

// readST reads every tensor of a safetensors file.
func readST(t *testing.T, path string) stFile {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := stFile{f32: tensor.Named{}, ints: map[string]safetensors.Int64Tensor{}, meta: f.Metadata()}
	if out.meta == nil {
		out.meta = map[string]string{}
	}
	for _, name := range f.Names() {
		dt, _, _ := f.Info(name)
		if dt == "I64" || dt == "I32" {
			v, shape, err := f.Int64(name)
			if err != nil {
				t.Fatal(err)
			}
			out.ints[name] = safetensors.Int64Tensor{Shape: shape, Data: v}
			continue
		}
		v, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		out.f32[name] = v
	}
	return out
}

// write writes s to dir/name and returns the path.
func (s stFile) write(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := safetensors.Write(p, s.f32, s.ints, s.meta); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStepRoundRefuseSilentResults: step and round refuse non-finite
// parameters, images and hyper-parameters, outputs that diverge, unknown
// --set keys, empty batches, float labels and client indices with a gap —
// each naming the tensor, key or file — and write nothing (before: NaN
// outputs and exit 0, an ignored key, a dropped client, a slice-bounds
// panic, "labels missing").
func TestStepRoundRefuseSilentResults(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	const td = "../../testdata/"
	dir := t.TempDir()
	model := td + "clip-tiny/openai.safetensors"
	initP, stepP, roundP := td+"mma-l2/adapters_init.safetensors", td+"mma-l2/step.safetensors", td+"mma-l2/round.safetensors"

	nanParams := readST(t, initP)
	const pname = "adapter_learner.shared_adapter.2.0.bias"
	nanParams.f32[pname].Data[3] = float32(math.NaN())
	nanParamsP := nanParams.write(t, dir, "nan_params.safetensors")

	nanImages := readST(t, stepP)
	nanImages.f32["images"].Data[7] = float32(math.Inf(1))
	nanImagesP := nanImages.write(t, dir, "nan_images.safetensors")

	empty := readST(t, stepP)
	empty.f32["images"] = tensor.New(0, 3, 32, 32)
	empty.ints["labels"] = safetensors.Int64Tensor{Shape: []int{0}, Data: []int64{}}
	emptyP := empty.write(t, dir, "empty.safetensors")

	noTokens := readST(t, stepP)
	noTokens.ints["tokens"] = safetensors.Int64Tensor{Shape: []int{0, 77}, Data: []int64{}}
	noTokensP := noTokens.write(t, dir, "no_tokens.safetensors")
	cutTokens := readST(t, stepP)
	cutTokens.ints["tokens"] = safetensors.Int64Tensor{Shape: []int{5, 76}, Data: cutTokens.ints["tokens"].Data[:5*76]}
	cutTokensP := cutTokens.write(t, dir, "cut_tokens.safetensors")

	floatLabels := readST(t, stepP)
	lab := floatLabels.ints["labels"]
	fl := tensor.New(len(lab.Data))
	for i, v := range lab.Data {
		fl.Data[i] = float32(v)
	}
	delete(floatLabels.ints, "labels")
	floatLabels.f32["labels"] = fl
	floatLabelsP := floatLabels.write(t, dir, "float_labels.safetensors")

	gap := readST(t, roundP)
	for _, m := range []map[string]*tensor.Tensor{gap.f32} {
		for name, v := range m {
			if strings.HasPrefix(name, "client1.") {
				delete(m, name)
				m["client2."+strings.TrimPrefix(name, "client1.")] = v
			}
		}
	}
	for name, v := range gap.ints {
		if strings.HasPrefix(name, "client1.") {
			delete(gap.ints, name)
			gap.ints["client2."+strings.TrimPrefix(name, "client1.")] = v
		}
	}
	gapP := gap.write(t, dir, "gap.safetensors")

	for _, c := range []struct {
		name, kind, params string
		batches, sets      []string
		want               []string
	}{
		{"nan parameter", "step", nanParamsP, []string{stepP}, nil, []string{"nan_params.safetensors", pname, "NaN"}},
		{"inf image", "step", initP, []string{nanImagesP}, nil, []string{"nan_images.safetensors", `"images"`, "+Inf"}},
		{"lr=nan", "step", initP, []string{stepP}, []string{"lr=nan"}, []string{"lr=nan", "finite"}},
		{"adapter_scale=inf", "step", initP, []string{stepP}, []string{"adapter_scale=inf"}, []string{"adapter_scale=inf", "finite"}},
		{"round momentum=NaN", "round", initP, []string{roundP, stepP}, []string{"momentum=NaN"}, []string{"momentum=NaN"}},
		{"diverging output", "step", initP, []string{stepP}, []string{"adapter_scale=1e38"}, []string{"output", "grad.", "diverge"}},
		{"unknown --set key", "step", initP, []string{stepP}, []string{"unknown_key=3"}, []string{`"unknown_key"`, "adapter_scale", "lr"}},
		{"empty batch", "step", initP, []string{emptyP}, nil, []string{`"images"`, "empty"}},
		{"empty tokens", "step", initP, []string{noTokensP}, nil, []string{`"tokens"`, "empty"}},
		{"tokens not whole rows", "step", initP, []string{cutTokensP}, nil, []string{`"tokens"`, "380", "77"}},
		{"float labels", "step", initP, []string{floatLabelsP}, nil, []string{`"labels"`, "float", "I64"}},
		{"client gap", "round", initP, []string{gapP, stepP}, nil, []string{"client2", "client1", "gap"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			args := []string{c.kind, "--method", "pfedmma", "--model", model, "--params", c.params, "--out", out}
			for _, b := range c.batches {
				args = append(args, "--batch", b)
			}
			for _, s := range c.sets {
				args = append(args, "--set", s)
			}
			_, err := execute(t, args...)
			assertRefused(t, c.name, err, out, c.want...)
		})
	}
	// the same inputs, unedited, still work, and a --set of a key the file
	// already holds is accepted
	out := filepath.Join(dir, "ok.safetensors")
	if _, err := execute(t, "step", "--method", "pfedmma", "--model", model, "--params", initP, "--batch", stepP,
		"--set", "adapter_scale=0.01", "--out", out); err != nil {
		t.Fatal(err)
	}
}

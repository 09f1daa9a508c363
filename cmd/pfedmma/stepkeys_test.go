package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestStepRefusesKeysTheMethodDoesNotRead: `pfedmma step`/`round
// --method kgcoop` (and fedmvp) refuse a --set key the method does not
// read (another method's num_experts would be ignored: byte-identical
// outputs), naming it, and KgCoOp csc=true (the class-specific context,
// not implemented), naming csc; a key it reads is taken.
func TestStepRefusesKeysTheMethodDoesNotRead(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	const td = "../../testdata/"
	for _, c := range []struct {
		kind, set, want string
	}{
		{"step", "num_experts=2", `do not read "num_experts"`},
		{"fedmvp-step", "csc=true", `do not read "csc"`},
		{"fedmvp-round", "fedmvp.n_ctx=4", `do not read "n_ctx"`},
		{"fedmvp-round", "lora_threshold=10", ""},
		{"round", "kgcoop.factorization=dplora", `do not read "factorization"`},
		{"step", "csc=true", "csc"},
		{"round", "kgcoop.csc=True", "class-specific context"},
		{"step", "w=4", ""},
	} {
		t.Run(c.kind+"/"+c.set, func(t *testing.T) {
			method, kind, _ := strings.Cut(c.kind, "-")
			if kind == "" {
				method, kind = "kgcoop", c.kind
			}
			batch, params := "kgcoop/step_rand", "kgcoop/init_rand"
			switch {
			case method == "fedmvp" && kind == "step":
				batch, params = "fedmvp/step", "fedmvp/init"
			case method == "fedmvp":
				batch, params = "fedmvp/round", "fedmvp/init"
			case kind == "round":
				batch = "kgcoop/round"
			}
			args := []string{kind, "--method", method, "--model", td + "clip-tiny/openai.safetensors",
				"--params", td + params + ".safetensors", "--batch", td + batch + ".safetensors",
				"--set", c.set, "--out", filepath.Join(t.TempDir(), "out.safetensors")}
			var buf bytes.Buffer
			rootCmd.SetOut(&buf)
			rootCmd.SetArgs(args)
			resetCommand(t, kind)
			err := rootCmd.Execute()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("a key %s reads is refused: %v", method, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("--set %s: error %v, want one naming %q", c.set, err, c.want)
			}
		})
	}
}

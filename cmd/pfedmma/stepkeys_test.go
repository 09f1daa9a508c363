package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
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

// TestStepKeysRefused: for every registered method, `pfedmma step`/`round`
// refuse each known hyper-parameter its parity.Settings.FixtureKeys does
// not list — every other method's keys and every run-configuration
// section key — naming the key and the method, and take each one it lists
// (a client<i> entry for any client index); a method without a fixture
// step (zero-shot) refuses any --set. End to end, FedPGP (which listed no
// keys before) refuses PromptFolio's frac and writes nothing.
func TestStepKeysRefused(t *testing.T) {
	universe := slices.Clone(parity.Keys)
	for _, m := range methods.All() {
		if s, ok := parity.SettingsOf(m); ok {
			universe = append(universe, s.FixtureKeys()...)
		}
		universe = append(universe, sectionYAMLKeys(t, m)...)
	}
	slices.Sort(universe)
	universe = slices.Compact(universe)
	for _, m := range methods.All() {
		name := m.Info().Name
		s, ok := parity.SettingsOf(m)
		if !ok {
			if err := parity.CheckMethodKeys(m, []string{"lr=1"}); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s (no fixture step) takes --set lr=1: %v", name, err)
			}
			continue
		}
		listed := s.FixtureKeys()
		if len(listed) == 0 {
			t.Errorf("%s lists no fixture keys", name)
		}
		for _, k := range universe {
			kk := strings.ReplaceAll(k, "client<i>.", "client3.")
			err := parity.CheckMethodKeys(m, []string{kk + "=1"})
			switch {
			case parity.Listed(listed, kk) && err != nil:
				t.Errorf("%s refuses %s, which it lists: %v", name, kk, err)
			case !parity.Listed(listed, kk) && (err == nil || !strings.Contains(err.Error(), `"`+kk+`"`) || !strings.Contains(err.Error(), name)):
				t.Errorf("%s: --set %s=1: error %v, want one naming the key and the method", name, kk, err)
			}
		}
	}
	const td = "../../testdata/fedpgp/"
	out := filepath.Join(t.TempDir(), "out.safetensors")
	_, err := execute(t, "step", "--method", "fedpgp", "--model", "../../testdata/clip-tiny/openai.safetensors",
		"--params", td+"init.safetensors", "--batch", td+"step.safetensors", "--set", "frac=0.5", "--out", out)
	if err == nil || !strings.Contains(err.Error(), `"frac"`) || !strings.Contains(err.Error(), "fedpgp") {
		t.Errorf("fedpgp step --set frac=0.5: error %v, want one naming frac and fedpgp", err)
	}
	if _, serr := os.Stat(out); serr == nil {
		t.Error("the refused step wrote its output")
	}
}

// sectionYAMLKeys are the keys of m's run-configuration section.
func sectionYAMLKeys(t *testing.T, m methods.Method) []string {
	t.Helper()
	sec := m.DefaultConfig()
	if sec == nil {
		return nil
	}
	b, err := yaml.Marshal(sec)
	if err != nil {
		t.Fatal(err)
	}
	var kv map[string]any
	if err := yaml.Unmarshal(b, &kv); err != nil {
		t.Fatal(err)
	}
	return slices.Collect(maps.Keys(kv))
}

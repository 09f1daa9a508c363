package kgcoop

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
)

// The tests of this file kill mutants `make mutants` found alive in
// methods/kgcoop (issue 35).

// TestClassTokenPositionOnlyEnd: the run configuration refuses
// class_token_position middle and front, naming the key, and takes end
// and the unset default.
func TestClassTokenPositionOnlyEnd(t *testing.T) {
	methodtest.RejectsSettings(t, "kgcoop", [][2]string{
		{"kgcoop.class_token_position=middle", "class_token_position"},
		{"kgcoop.class_token_position=front", "class_token_position"}})
	for _, pos := range []string{"end", ""} {
		e := config.Default()
		e.Methods = []string{"kgcoop"}
		if err := e.Set("kgcoop.class_token_position", pos); err != nil {
			t.Fatal(err)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("class_token_position %q refused: %v", pos, err)
		}
	}
}

// TestStepLossTerms: the step's loss_kg is w times the reference's score
// (1 − mean cos), and the loss their sum with the cross-entropy.
func TestStepLossTerms(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init_rand.safetensors")
	ref, meta := paritytest.Read(t, dir+"step_rand.safetensors")
	out, err := StepFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	w, err := prompt.MetaFloat(meta, "w")
	if err != nil {
		t.Fatal(err)
	}
	score := float64(ref["score"].Data[0])
	if got := float64(out["loss_kg"].Data[0]); math.Abs(got-w*score) > 1e-4*(1+w*score) {
		t.Errorf("loss_kg %.6g, want w·score %.6g", got, w*score)
	}
}

// TestRandomContextInit: without init words the context is drawn
// N(0, init_std²): its sample standard deviation is init_std's within
// sampling error, for two init_std.
func TestRandomContextInit(t *testing.T) {
	m := paritytest.Model(t)
	ref, _ := paritytest.Read(t, dir+"step_rand.safetensors")
	tokens, err := prompt.Ints(ref, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	for _, std := range []float64{0.02, 0.5} {
		l, err := New(m, tokens, tokens, Config{NCtx: 4, W: 8, InitStd: std, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		var s float64
		for _, v := range l.ctx.Data {
			s += float64(v) * float64(v)
		}
		got := math.Sqrt(s / float64(len(l.ctx.Data)))
		if math.Abs(got-std) > 0.15*std {
			t.Errorf("init_std %g: the context's standard deviation is %.4g over %d values", std, got, len(l.ctx.Data))
		}
	}
}

// TestConfigValidateBounds: Config.Validate names n_ctx below 1, a
// negative w and a negative init_std, and takes their edges (1, 0, 0);
// fixture metadata csc that is no boolean is refused naming csc.
func TestConfigValidateBounds(t *testing.T) {
	ok := Config{NCtx: 1, W: 0, InitStd: 0}
	if err := ok.Validate(); err != nil {
		t.Errorf("the edges n_ctx 1, w 0, init_std 0 refused: %v", err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{NCtx: 0, W: 8}, "n_ctx"},
		{Config{NCtx: 4, W: -0.5}, "w -0.5"},
		{Config{NCtx: 4, W: 8, InitStd: -0.01}, "init_std"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.cfg, err, c.want)
		}
	}
	_, err := ConfigFromMeta(map[string]string{"n_ctx": "4", "w": "8", "csc": "maybe"})
	if err == nil || !strings.Contains(err.Error(), "csc") {
		t.Errorf("csc=maybe: error %v, want one naming csc", err)
	}
	if _, err := ConfigFromMeta(map[string]string{"n_ctx": "4", "w": "8", "csc": "False"}); err != nil {
		t.Errorf("csc=False refused: %v", err)
	}
}

package kgcoop

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// TestRoundReadsTemplateTokens: `pfedmma round --method kgcoop` pulls the
// context towards the round file's "template_tokens", not towards the
// class prompt rows (testdata's two are the same, so its round cannot tell
// them apart). With the template's second word replaced in every row, the
// production round (parity.RunRound: Build, federation Sites, the
// Coordinator) equals the fixture's replay loop on the same inputs
// (RoundFromFile, which TestRoundFixture holds to the authors' round), and
// differs from the round on the original template.
func TestRoundReadsTemplateTokens(t *testing.T) {
	m := paritytest.Model(t)
	f, err := parity.Load(m, dir+"init_rand.safetensors", []string{dir + "round.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	// another template: the word after SOT ("photo" of "a photo of a")
	ctx := m.W.Config.Text.ContextLength
	tmpl := append([]int(nil), f.Ints["template_tokens"]...)
	for r := 0; r < len(tmpl); r += ctx {
		tmpl[r+2] = (tmpl[r+2] + 17) % 990
	}
	f.Ints["template_tokens"] = tmpl
	got, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	init, _ := paritytest.Read(t, dir+"init_rand.safetensors")
	batch, meta := paritytest.Read(t, dir+"round.safetensors")
	for i, v := range tmpl {
		batch["template_tokens"].Data[i] = float32(v)
	}
	want, err := RoundFromFile(m, init, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client0.trained." + ParamCtx, "client1.trained." + ParamCtx, "global." + ParamCtx} {
		paritytest.Rel(t, name, got[name], want[name], 1e-4)
		var d float64
		for i, v := range got[name].Data {
			d = max(d, float64(v-orig[name].Data[i]), float64(orig[name].Data[i]-v))
		}
		if d == 0 {
			t.Errorf("%s: the same with another template", name)
		}
	}
}

package all_test

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	_ "github.com/pfedmma/pfedmma/methods/all"
	"github.com/pfedmma/pfedmma/parity"
)

// TestClassTokenPositionKeys: the CoOp-style prompt methods whose authors'
// code places the class name in the middle or front accept
// <method>.class_token_position end, middle and front and refuse other
// values naming the key; those whose code has no such position (or fails
// on it) refuse middle and front naming the key and the code, in the run
// configuration and in the fixture metadata of `pfedmma step` / `round`.
func TestClassTokenPositionKeys(t *testing.T) {
	validate := func(method, pos string) error {
		e := config.Default()
		e.Methods = []string{method}
		if err := e.Set(method+".class_token_position", pos); err != nil {
			return err
		}
		return e.Validate()
	}
	for _, m := range []string{"promptfl", "fedpgp", "fedotp", "pfedmoap"} {
		for _, pos := range []string{"end", "middle", "front"} {
			if err := validate(m, pos); err != nil {
				t.Errorf("%s.class_token_position=%s: %v", m, pos, err)
			}
		}
		if err := validate(m, "back"); err == nil || !strings.Contains(err.Error(), m+".class_token_position") {
			t.Errorf("%s.class_token_position=back: error %v, want one naming the key", m, err)
		}
	}
	for _, m := range []string{"cocoop", "kgcoop", "fedtpg", "promptfolio", "fedpha"} {
		if err := validate(m, "end"); err != nil {
			t.Errorf("%s.class_token_position=end: %v", m, err)
		}
		for _, pos := range []string{"middle", "front"} {
			err := validate(m, pos)
			if err == nil || !strings.Contains(err.Error(), m+".class_token_position") || !strings.Contains(err.Error(), "only end") {
				t.Errorf("%s.class_token_position=%s: error %v, want a refusal naming the key and the authors' code", m, pos, err)
			}
			meth, err := methods.Get(m)
			if err != nil {
				t.Fatal(err)
			}
			fs, ok := parity.SettingsOf(meth)
			if !ok {
				t.Fatalf("%s: no fixture settings", m)
			}
			f := &parity.Fixture{Meta: map[string]string{"class_token_position": pos, "n_ctx": "4"}}
			if _, err := fs.SettingsFrom(f); err == nil || !strings.Contains(err.Error(), "class_token_position") {
				t.Errorf("%s fixture metadata class_token_position=%s: error %v", m, pos, err)
			}
		}
	}
}

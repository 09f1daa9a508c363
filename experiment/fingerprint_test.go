package experiment

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
)

// TestFingerprintIgnoresMethodsNotRun: a run's fingerprint hashes the
// settings of the methods it runs, so that registering a method (or
// changing the settings of one the run does not run) leaves it as it was,
// while a setting of a method it runs changes it.
func TestFingerprintIgnoresMethodsNotRun(t *testing.T) {
	fp := func(sets ...string) string {
		t.Helper()
		e, err := config.Preset(config.DefaultPreset)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append([]string{"methods=[zeroshot,pfedmma]"}, sets...) {
			k, v, _ := strings.Cut(s, "=")
			if err := e.Set(k, v); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		return e.Fingerprint()
	}
	base := fp()
	if got := fp("promptfl.n_ctx=3"); got != base {
		t.Error("a setting of PromptFL, which the run does not run, changed its fingerprint")
	}
	if got := fp("pfedmma.dim=8"); got == base {
		t.Error("a setting of pFedMMA, which the run runs, left its fingerprint unchanged")
	}
}

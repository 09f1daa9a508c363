package experiment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
)

// TestPresetEvidenceFingerprints: each run under docs/presets (the
// evidence of the README's "Other presets" figures) was made with the
// preset as it is today — a preset whose settings or defaults changed
// (train.drop_last auto moved these) must be measured again
// (docs/presets/README.md).
func TestPresetEvidenceFingerprints(t *testing.T) {
	for _, name := range []string{"world-domains", "fashion-mnist"} {
		e, err := config.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "docs", "presets", name, "fingerprint.txt")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != e.Fingerprint() {
			t.Errorf("%s: fingerprint %s, but the preset %s is %s today: measure it again (docs/presets/README.md)", path, got, name, e.Fingerprint())
		}
	}
}

package experiment

import (
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/zeroshot"
)

// probe is zero-shot CLIP under another name whose Frozen declaration the
// test chooses: what experiment and predict decide about it must follow
// the declaration, never the name.
type probe struct {
	zeroshot.Method
	name   string
	frozen bool
}

func (p probe) Info() methods.Info { i := p.Method.Info(); i.Name = p.name; return i }
func (p probe) Frozen() bool       { return p.frozen }

func init() {
	methods.Register(probe{name: "probe_frozen", frozen: true})
	methods.Register(probe{name: "probe_trains", frozen: false})
}

// TestMethodsDeclareNotNames (issue 20): a federation's trained method and
// the methods that run on image features come from the methods'
// declarations (predict's own test covers its default method and site
// file).
func TestMethodsDeclareNotNames(t *testing.T) {
	if got, err := TrainedMethod([]string{"probe_frozen", PFedMMA}); err != nil || got != PFedMMA {
		t.Errorf("a method declaring Frozen beside pfedmma: trained method %q, %v; want pfedmma", got, err)
	}
	if _, err := TrainedMethod([]string{"probe_trains", PFedMMA}); err == nil || !strings.Contains(err.Error(), "one trained method") {
		t.Errorf("zero-shot's code under a name declaring it trains is not ignored: error %v", err)
	}
	if got, err := TrainedMethod([]string{ZeroShot, "promptfl"}); err != nil || got != "promptfl" {
		t.Errorf("zeroshot beside promptfl: trained method %q, %v", got, err)
	}
	fm := featureMethods()
	for _, want := range []string{ZeroShot, "probe_frozen", "promptfl", "fedpgp", "clip_adapter"} {
		if !slices.Contains(fm, want) {
			t.Errorf("methods on image features %v lack %s", fm, want)
		}
	}
	if slices.Contains(fm, PFedMMA) {
		t.Errorf("methods on image features %v include pfedmma, which runs ViT blocks", fm)
	}
}

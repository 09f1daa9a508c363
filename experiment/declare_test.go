package experiment

import (
	"errors"
	"io/fs"
	"path/filepath"
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

// TestMethodsDeclareNotNames (issue 20): a federation's trained method,
// predict's default method and whether a site file is needed come from the
// methods.Frozen declaration.
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
	info := &RunInfo{Methods: []string{"probe_frozen", "promptfl", PFedMMA}}
	if m, err := predictMethod(info, PredictConfig{}); err != nil || m.Info().Name != "promptfl" {
		t.Errorf("predict's default method: %v, %v; want the first trained, promptfl", m, err)
	}
	info.Methods = []string{"probe_trains", PFedMMA}
	if m, err := predictMethod(info, PredictConfig{}); err != nil || m.Info().Name != "probe_trains" {
		t.Errorf("predict's default method: %v, %v; want probe_trains, which declares it trains", m, err)
	}
	missing := filepath.Join(t.TempDir(), SiteFile(0))
	if saved, err := readSiteFile(missing, false); err != nil || len(saved) != 0 {
		t.Errorf("a frozen method's missing site file: %v, %v; want no tensors", saved, err)
	}
	if _, err := readSiteFile(missing, true); err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a trained method's missing site file: error %v", err)
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

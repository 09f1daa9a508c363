package predict

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/methods"
	_ "github.com/pfedmma/pfedmma/methods/all" // every method
	"github.com/pfedmma/pfedmma/methods/zeroshot"
	"github.com/pfedmma/pfedmma/runfiles"
)

// probe is zero-shot CLIP under another name whose Frozen declaration the
// test chooses: what predict decides about it must follow the
// declaration, never the name.
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

// TestMethodsDeclareNotNames (issue 20): predict's default method and
// whether a site file is needed come from the methods.Frozen declaration.
func TestMethodsDeclareNotNames(t *testing.T) {
	info := &runfiles.Info{Methods: []string{"probe_frozen", "promptfl", "pfedmma"}}
	if m, err := predictMethod(info, PredictConfig{}); err != nil || m.Info().Name != "promptfl" {
		t.Errorf("predict's default method: %v, %v; want the first trained, promptfl", m, err)
	}
	info.Methods = []string{"probe_trains", "pfedmma"}
	if m, err := predictMethod(info, PredictConfig{}); err != nil || m.Info().Name != "probe_trains" {
		t.Errorf("predict's default method: %v, %v; want probe_trains, which declares it trains", m, err)
	}
	missing := filepath.Join(t.TempDir(), runfiles.SiteFile(0))
	if saved, err := readSiteFile(missing, false); err != nil || len(saved) != 0 {
		t.Errorf("a frozen method's missing site file: %v, %v; want no tensors", saved, err)
	}
	if _, err := readSiteFile(missing, true); err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a trained method's missing site file: error %v", err)
	}
}

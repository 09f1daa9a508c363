package experiment

import (
	"github.com/pfedmma/pfedmma/config"
	_ "github.com/pfedmma/pfedmma/methods/all" // every method
	"github.com/pfedmma/pfedmma/methods/pfedmma"
	"github.com/pfedmma/pfedmma/methods/promptfl"
)

// Method names used by the tests.
const (
	ZeroShot = "zeroshot"
	PFedMMA  = "pfedmma"
)

// mmaSections configures pfedmma's adapters (start block, width, scale).
func mmaSections(start, dim int, scale float64) map[string]config.Section {
	return map[string]config.Section{PFedMMA: &pfedmma.Settings{Start: start, Dim: dim, Scale: scale, Activation: "relu"}}
}

// promptSections configures promptfl's context length.
func promptSections(nCtx int) map[string]config.Section {
	return map[string]config.Section{"promptfl": &promptfl.Settings{NCtx: nCtx, InitStd: 0.02}}
}

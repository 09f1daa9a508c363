package docsgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/pfedmma/pfedmma/tune"
)

// A tune table is a generated block named tune-… whose marker names the
// trials.json a `pfedmma tune --out DIR` wrote: its body is the table of
// that tune's tune.md (tune.Result.Markdown: every trial's settings, each
// seed's and the mean validation accuracy, the chosen trial in bold),
//
//	<!-- generated:tune-dpfpl (make docs; from docs/tuning/dpfpl/trials.json) -->…<!-- /generated:tune-dpfpl -->
const tuneTablePrefix = "tune-"

// renderTuneTable renders the tune table of the trials.json source names
// (relative to root).
func renderTuneTable(root, source string) (string, error) {
	r, err := readTrials(filepath.Join(root, filepath.FromSlash(source)))
	if err != nil {
		return "", err
	}
	return "\n\n" + r.Markdown() + "\n", nil
}

// readTrials reads a tune's trials.json back into its result: the plan,
// every trial and the chosen one (by its 1-based trial number).
func readTrials(path string) (*tune.Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j struct {
		Plan   tune.Plan    `json:"plan"`
		Trials []tune.Trial `json:"trials"`
		Chosen int          `json:"chosen"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	best := slices.IndexFunc(j.Trials, func(t tune.Trial) bool { return t.Index == j.Chosen })
	if best < 0 {
		return nil, fmt.Errorf("%s: key chosen: trial %d is not among the %d trials", path, j.Chosen, len(j.Trials))
	}
	for _, t := range j.Trials {
		if len(t.Settings) != len(j.Plan.Grid) || (len(j.Plan.Seeds) > 1 && len(t.PerSeed) != len(j.Plan.Seeds)) {
			return nil, fmt.Errorf("%s: trial %d: want %d settings and %d val_per_seed (plan.grid, plan.seeds)", path, t.Index, len(j.Plan.Grid), len(j.Plan.Seeds))
		}
	}
	return &tune.Result{Plan: j.Plan, Trials: j.Trials, Best: best}, nil
}

package docsgen

import (
	"path/filepath"
	"strings"

	"github.com/pfedmma/pfedmma/bench"
)

// paperScaleBlock renders the paper-scale projection and its measured
// rounds (docs/paperscale/paperscale.json) as `pfedmma bench experiment`
// writes them into paperscale.md.
func paperScaleBlock(docsDir string) (Block, error) {
	r, err := bench.MergePaperScale([]string{filepath.Join(docsDir, "paperscale", "paperscale.json")}, true)
	if err != nil {
		return Block{}, err
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		return Block{}, err
	}
	return Block{Name: "paperscale-table", Source: "docs/paperscale/paperscale.json", Body: "\n" + b.String() + "\n"}, nil
}

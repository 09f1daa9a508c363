package deploy

import (
	"testing"

	"github.com/pfedmma/pfedmma/internal/testmodel"
	_ "github.com/pfedmma/pfedmma/methods/all" // every method
	_ "github.com/pfedmma/pfedmma/world"       // the generated "world" dataset
)

// smallModel writes a tiny random CLIP (context 16, seed 7) and returns its
// folder.
func smallModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testmodel.Write(dir, 16, 7); err != nil {
		t.Fatal(err)
	}
	return dir
}

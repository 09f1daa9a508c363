package runfiles

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// A run folder keeps every method's files in the same places, whether the
// run was simulated (`pfedmma run`) or federated over the network (`pfedmma
// serve` writes the global file, each `pfedmma site` its own site file in
// its state folder):
//
//	sites/<method>/client_NNN.safetensors   what site NNN keeps (for predict)
//	global/<method>.safetensors             the server's shared tensors
//
// Runs written before this layout kept pFedMMA's files in adapters/
// (client_NNN.safetensors and global_shared.safetensors); their run.json
// names that folder, and every reader goes through run.json.
const (
	// SitesDir holds one folder of site files per method.
	SitesDir = "sites"
	// GlobalDir holds one file of global tensors per method.
	GlobalDir = "global"
	// LegacyAdaptersDir is where runs before the sites/global layout kept
	// pFedMMA's site files and its global_shared.safetensors.
	LegacyAdaptersDir = "adapters"
)

// SitesFolder is the folder, relative to a run folder, of method's site
// files.
func SitesFolder(method string) string { return filepath.Join(SitesDir, method) }

// GlobalFile is the file, relative to a run folder, of method's global
// tensors.
func GlobalFile(method string) string { return filepath.Join(GlobalDir, method+".safetensors") }

// SiteFile is the name of client id's file in its method's sites folder.
func SiteFile(id int) string { return fmt.Sprintf("client_%03d.safetensors", id) }

// WriteSite writes what site id keeps to dir/sites/<method>/client_NNN.safetensors,
// with method, client and meta in the file's metadata.
func WriteSite(dir, method string, id int, params tensor.Named, meta map[string]string) error {
	ad := filepath.Join(dir, SitesFolder(method))
	if err := os.MkdirAll(ad, 0o755); err != nil {
		return err
	}
	m := map[string]string{"method": method, "client": fmt.Sprint(id)}
	for k, v := range meta {
		m[k] = v
	}
	return safetensors.Write(filepath.Join(ad, SiteFile(id)), params, nil, m)
}

// WriteGlobal writes the server's shared tensors to dir/global/<method>.safetensors.
func WriteGlobal(dir, method string, global tensor.Named) error {
	if err := os.MkdirAll(filepath.Join(dir, GlobalDir), 0o755); err != nil {
		return err
	}
	return safetensors.Write(filepath.Join(dir, GlobalFile(method)), global, nil, map[string]string{"method": method})
}

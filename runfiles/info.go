// Package runfiles names, writes and reads the files of a run folder that
// `pfedmma run`, `serve`, `site` and `predict` share: the run description
// run.json ([Info]) and each method's tensors (sites/<method>/client_NNN
// and global/<method>, see [SitesDir]).
package runfiles

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/protocol"
)

// Info is written to run.json: what `pfedmma predict` needs to rebuild a
// client's classifier.
type Info struct {
	Model    string           `json:"model"`
	Vocab    string           `json:"vocab,omitempty"`
	Template string           `json:"template"`
	Dataset  string           `json:"dataset"`
	Protocol string           `json:"protocol"`
	Classes  []string         `json:"classes"`
	Spaces   []protocol.Space `json:"spaces"`
	// ClientSpace maps a client ID to the label space it was trained over.
	ClientSpace map[int]int `json:"client_space"`
	// Methods lists the run's methods; Sections holds each one's resolved
	// settings (YAML) and Sites the folder of its per-site files.
	Methods  []string          `json:"methods"`
	Sections map[string]string `json:"sections,omitempty"`
	Sites    map[string]string `json:"sites,omitempty"`
	// ModelSHA256 identifies the model (ModelDigest): `predict` finds it
	// by it on another machine (the embedded model) and checks a --model
	// given instead of Model against it.
	ModelSHA256 string `json:"model_sha256,omitempty"`
	// Served marks a run coordinated by `pfedmma serve`: each site keeps
	// its personalised file in its own state folder, not in the run's.
	Served bool `json:"served,omitempty"`
}

// InfoFile is the name of the run description in an output folder.
const InfoFile = "run.json"

// WriteInfo writes info to dir's run.json. When info names a model, its
// digest (ModelDigest) is recorded with it (a model that cannot be read
// here is logged and left without); the model and vocabulary paths are
// written relative to dir when they lie inside it.
func WriteInfo(dir string, info Info) error {
	if info.Model != "" {
		// what predict checks a moved or replaced model against; a run
		// whose model cannot be read again here goes on without it
		sum, err := ModelDigest(info.Model)
		if err != nil {
			slog.Warn("run.json: no model digest", "err", err)
		}
		info.ModelSHA256 = sum
	}
	info.Model, info.Vocab = runRelative(dir, info.Model), runRelative(dir, info.Vocab)
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(dir, InfoFile), append(data, '\n'))
}

// ReadInfo reads run.json from a run's output folder.
func ReadInfo(dir string) (*Info, error) {
	path := filepath.Join(dir, InfoFile)
	data, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	info, err := decodeInfo(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// runRelative returns path relative to the run folder dir when it lies
// inside it (the run folder can move with it), else absolute.
func runRelative(dir, path string) string {
	if path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if d, err := filepath.Abs(dir); err == nil {
		if rel, err := filepath.Rel(d, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return rel
		}
	}
	return abs
}

// ResolvePath returns a path run.json holds: a relative one is relative
// to the run folder dir.
func ResolvePath(dir, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// ModelDigest is the SHA-256 of a model: of the file, or, for a model
// folder, of the names and SHA-256s of its files a loader may open
// (inputfile.ModelFileExts), in name order.
func ModelDigest(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	if !st.IsDir() {
		return fileSHA256(path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	h := sha256.New()
	for _, e := range entries {
		if !slices.Contains(inputfile.ModelFileExts, strings.ToLower(filepath.Ext(e.Name()))) {
			continue
		}
		p := filepath.Join(path, e.Name())
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%s\n", e.Name(), sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileSHA256(path string) (string, error) {
	f, err := inputfile.Open(path)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("model %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

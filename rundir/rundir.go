package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/runfiles"
)

// LockFile is the file in a run folder that `pfedmma run` holds an
// exclusive lock on while it writes there; it holds the holder's pid.
const LockFile = ".pfedmma.lock"

// Lock takes an exclusive, non-blocking lock on dir's lock file and
// writes this process's pid into it. A second run into the same folder gets
// an error naming the holder's pid. The lock goes with the process (also
// when it is killed); unlock releases it earlier.
func Lock(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			holder := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(holder); perr != nil {
				holder = "unknown"
			}
			return nil, fmt.Errorf("run folder %s is in use by another pfedmma run (pid %s); wait for it to end or choose another --out", dir, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// RunMarkerFile is the file that makes a folder a pfedmma run folder: `run`
// writes it (holding the run's identity) before anything else, and `--force`
// clears only a folder that holds it. No generic name (config.yaml,
// metrics.jsonl) counts: a user's folder may hold those too.
const RunMarkerFile = ".pfedmma-run"

// RunMarker is the content of RunMarkerFile.
type RunMarker struct {
	// Tool is always "pfedmma run".
	Tool string `json:"tool"`
	// Fingerprint identifies the configuration the run started with.
	Fingerprint string `json:"fingerprint"`
	Started     string `json:"started"`
	// Finished is when the run ended (RFC 3339); empty while it runs or
	// after it was stopped.
	Finished string `json:"finished,omitempty"`
}

const runMarkerTool = "pfedmma run"

// ReadRunMarker reads dir's marker; ok is false when dir holds none (or
// one that is not pfedmma's).
func ReadRunMarker(dir string) (m RunMarker, ok bool, err error) {
	path := filepath.Join(dir, RunMarkerFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > 1<<16 {
		return m, false, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return m, false, err
	}
	if json.Unmarshal(b, &m) != nil || m.Tool != runMarkerTool {
		return RunMarker{}, false, nil
	}
	return m, true, nil
}

// WriteRunMarker writes dir's marker atomically.
func WriteRunMarker(dir string, m RunMarker) error {
	m.Tool = runMarkerTool
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(dir, RunMarkerFile), append(b, '\n'))
}

// runFinished says whether dir holds a run that ended: its marker says so,
// or (a run folder from before the marker) its top-level summary.json,
// written last, exists.
func runFinished(dir string) (when string, finished bool, err error) {
	m, ok, err := ReadRunMarker(dir)
	if err != nil {
		return "", false, err
	}
	if ok {
		return m.Finished, m.Finished != "", nil
	}
	if fi, err := os.Stat(filepath.Join(dir, report.SummaryFile)); err == nil && fi.Mode().IsRegular() {
		return fi.ModTime().UTC().Format(time.RFC3339), true, nil
	}
	return "", false, nil
}

// isRunOutput says whether name, a top-level entry of a run folder, is one
// pfedmma run writes there.
func isRunOutput(name string, isDir bool) bool {
	if isDir {
		switch {
		case name == runfiles.LegacyAdaptersDir, name == runfiles.SitesDir, name == runfiles.GlobalDir, name == "checkpoints":
			return true
		case strings.HasPrefix(name, "seed_"), strings.HasPrefix(name, "fold-"):
			return true
		}
		return false
	}
	switch name {
	case RunMarkerFile, LockFile, FingerprintFile, "config.yaml", runfiles.InfoFile,
		report.MetricsJSONL, report.MetricsCSV, report.SummaryFile, report.LODOFile,
		"report.md", "curves.png", "final.png", "radar.png", "curves.svg", "final.svg", "radar.svg",
		"global.safetensors":
		return true
	}
	// atomicfile's temporary files and the prefix cache's spill files
	// left by a killed run
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") ||
		strings.HasPrefix(name, "actcache-") && strings.HasSuffix(name, ".spill")
}

// checkRunDir says whether dir can take a fresh (not resumed) run,
// reading only: an empty or missing folder can; a folder holding anything
// else only with force, and only when its marker file proves it holds an
// earlier pfedmma run and it holds nothing but what a run writes (so
// --force never deletes a file pfedmma did not write). names are the
// entries force would clear.
func checkRunDir(dir string, force bool) (names []string, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var foreign []string
	for _, e := range entries {
		if e.Name() == LockFile {
			continue
		}
		names = append(names, e.Name())
		if !isRunOutput(e.Name(), e.IsDir()) {
			foreign = append(foreign, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	list := func(ns []string) string {
		if len(ns) > 5 {
			ns = append(ns[:5:5], fmt.Sprintf("… %d more", len(ns)-5))
		}
		return strings.Join(ns, ", ")
	}
	_, isRun, err := ReadRunMarker(dir)
	if err != nil {
		return nil, fmt.Errorf("--out %s: %w", dir, err)
	}
	if !force {
		return nil, notEmptyError(dir, list(names), isRun)
	}
	if !isRun {
		return nil, fmt.Errorf("--out %s is not empty (%s) and holds no pfedmma run (no %s marker file); --force clears only earlier runs: choose an empty or new folder",
			dir, list(names), RunMarkerFile)
	}
	if len(foreign) > 0 {
		return nil, fmt.Errorf("--out %s holds a pfedmma run but also files pfedmma did not write (%s); --force deletes nothing it did not write: move them away or choose a new folder",
			dir, list(foreign))
	}
	return names, nil
}

// notEmptyError refuses a fresh run into a folder that is not empty, with
// only the ways out that work there: --resume and --force for a folder
// holding a run (its marker file), --resume alone for a run from before
// the marker (its fingerprint file), a new folder for anything else.
func notEmptyError(dir, names string, isRun bool) error {
	fi, err := os.Stat(filepath.Join(dir, FingerprintFile))
	resumable := err == nil && fi.Mode().IsRegular()
	switch {
	case isRun:
		return fmt.Errorf("--out %s is not empty (%s): pass --resume to continue the run it holds, --force to clear it and start again, or choose a new folder",
			dir, names)
	case resumable:
		return fmt.Errorf("--out %s is not empty (%s): pass --resume to continue the run it holds (from before %s marker files: --force cannot clear it), or choose a new folder",
			dir, names, RunMarkerFile)
	}
	return fmt.Errorf("--out %s is not empty (%s) and holds no pfedmma run: choose an empty or new folder", dir, names)
}

// prepareRunDir makes dir ready for a fresh run as checkRunDir allows,
// clearing an earlier run when force.
func prepareRunDir(dir string, force bool) error {
	names, err := checkRunDir(dir, force)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("--force: clearing %s: %w", dir, err)
		}
	}
	return nil
}

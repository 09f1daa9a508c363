package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile is the file in a run folder that `pfedmma run` holds an
// exclusive lock on while it writes there; it holds the holder's pid.
const lockFile = ".pfedmma.lock"

// lockRunDir takes an exclusive, non-blocking lock on dir's lock file and
// writes this process's pid into it. A second run into the same folder gets
// an error naming the holder's pid. The lock goes with the process (also
// when it is killed); unlock releases it earlier.
func lockRunDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
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

// runMarkers are files only a pfedmma run folder holds.
var runMarkers = []string{fingerprintFile, "run.json", "config.yaml", "metrics.jsonl"}

// prepareRunDir makes dir ready for a fresh (not resumed) run: an empty or
// new folder is used as it is; a folder holding anything else is refused
// unless force, which clears it first, and only when it holds an earlier
// pfedmma run (so a mistyped --out never deletes unrelated files).
func prepareRunDir(dir string, force bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	isRun := false
	for _, e := range entries {
		if e.Name() == lockFile {
			continue
		}
		names = append(names, e.Name())
		if slices.Contains(runMarkers, e.Name()) || (e.IsDir() && strings.HasPrefix(e.Name(), "seed_")) {
			isRun = true
		}
	}
	if len(names) == 0 {
		return nil
	}
	shown := names
	if len(shown) > 5 {
		shown = append(shown[:5:5], "…")
	}
	switch {
	case !force:
		return fmt.Errorf("--out %s is not empty (%s): pass --resume to continue the run it holds, --force to clear it and start again, or choose a new folder",
			dir, strings.Join(shown, ", "))
	case !isRun:
		return fmt.Errorf("--out %s is not empty (%s) and holds no pfedmma run; --force clears only earlier runs: choose an empty or new folder",
			dir, strings.Join(shown, ", "))
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("--force: clearing %s: %w", dir, err)
		}
	}
	return nil
}

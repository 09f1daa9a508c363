// Package inputfile refuses input paths that are not regular files (FIFOs,
// devices, sockets) before they are opened: opening a FIFO blocks until a
// writer appears, and a device can be read forever.
package inputfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Check returns nil when path (after following symlinks) is a regular
// file, and an error naming the path and what it is otherwise.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: %s, not a regular file", path, kind(st.Mode()))
	}
	return nil
}

// CheckAny accepts a regular file, or a folder whose entries that a model
// loader may open (ModelFileExts) are regular files or folders (a model
// folder: its files are opened by name). Other entries (a user's FIFO or
// socket beside the model) are never opened, so they are not blamed.
func CheckAny(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	switch {
	case st.Mode().IsRegular():
		return nil
	case !st.IsDir():
		return fmt.Errorf("%s: %s, not a regular file or folder", path, kind(st.Mode()))
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(path, e.Name())
		st, err := os.Stat(p)
		if err != nil {
			continue // a dangling link is reported by whoever needs it
		}
		if !st.Mode().IsRegular() && !st.IsDir() && loaderMayOpen(e.Name()) {
			return fmt.Errorf("%s: %s, not a regular file", p, kind(st.Mode()))
		}
	}
	return nil
}

// ModelFileExts are the endings of the files a model or vocabulary loader
// opens in a folder: weights (.safetensors, PyTorch's .bin, .pt, .pth,
// .ckpt), configurations and shard indexes (.json), vocabularies (.txt,
// .gz).
var ModelFileExts = []string{".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".json", ".txt", ".gz"}

// loaderMayOpen says whether a folder entry named name is one a loader
// may open (its ending is one of ModelFileExts).
func loaderMayOpen(name string) bool {
	return slices.Contains(ModelFileExts, strings.ToLower(filepath.Ext(name)))
}

// Open opens path for reading after [Check]; the file is checked again
// once open, so a path swapped in between cannot slip through.
func Open(path string) (*os.File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s: %s, not a regular file", path, kind(st.Mode()))
		}
		return nil, err
	}
	return f, nil
}

// ReadFile is [os.ReadFile] for regular files only.
func ReadFile(path string) ([]byte, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a folder"
	}
	return "a special file"
}

// Package atomicfile writes files so that readers see either the old or the
// new content, never a partial one: the data goes to a temporary file in the
// same folder, which is synced and then renamed over the target.
package atomicfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates or replaces path with what fill writes (mode 0644). When
// fill or any step fails, the temporary file is removed and path is left
// untouched.
func Write(path string, fill func(io.Writer) error) (err error) {
	if err := CheckTarget(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Sync the folder so the rename itself is durable (best effort: some
	// file systems cannot sync folders).
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// WriteBytes is Write for data already in memory.
func WriteBytes(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(data))
		return err
	})
}

// CheckTarget refuses an output path that names an existing folder (the
// final rename could only fail, with "file exists"), before anything is
// computed or written.
func CheckTarget(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a folder; give the path of a file to write (inside it or elsewhere)", path)
	}
	return nil
}

package coordstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkAccess says, before SQLite opens path, whether this process may
// write the database and the folder holding it (SQLite in WAL mode creates
// path-wal and path-shm beside it). SQLite alone reports only "unable to
// open database file (14)"; this error names the folder (the coordinator's
// --state), the user, the owner and mode it found, and what to change.
func checkAccess(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state folder %s (--state): %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state folder %s (--state) is not a folder", dir)
	}
	if unix.Access(dir, unix.W_OK|unix.X_OK) != nil {
		return permissionError(dir, "folder", fi)
	}
	if fi, err := os.Stat(path); err == nil && unix.Access(path, unix.R_OK|unix.W_OK) != nil {
		return permissionError(path, "database", fi)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state database %s (in --state %s): %w", path, dir, err)
	}
	return nil
}

// permissionError says that this process's user cannot write what (the
// state folder or its database), with its owner and mode and the remedies.
func permissionError(path, what string, fi fs.FileInfo) error {
	owner := "unknown owner"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = fmt.Sprintf("owned by uid %d gid %d", st.Uid, st.Gid)
	}
	uid, gid := os.Getuid(), os.Getgid()
	return fmt.Errorf("state %s %s (--state): permission denied: the coordinator runs as uid %d gid %d and cannot write it (%s, mode %s); "+
		"make it writable by that user (chown -R %d:%d %s), or run the coordinator as its owner (docker run --user \"$(id -u):$(id -g)\")",
		what, path, uid, gid, owner, fi.Mode().Perm(), uid, gid, path)
}

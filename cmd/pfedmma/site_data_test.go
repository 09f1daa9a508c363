package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSiteDataChecked: site --data is checked whatever the dataset: a
// missing folder, a file, and a folder given for the generated world are
// refused naming --data, before any connection is tried (before: under
// the world dataset a missing folder was ignored and the site trained on
// generated data). A site without experiment flags learns the dataset from
// the coordinator's task; with them (here --preset world-deploy) a folder
// for the generated world is refused before connecting.
func TestSiteDataChecked(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		data, want string
		flags      []string
	}{
		{"/nonexistent/pfedmma-data", "no such file", nil},
		{file, "not a folder", nil},
		{t.TempDir(), "world", []string{"--preset", "world-deploy"}},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := execute(t, append([]string{"site", "--server", "127.0.0.1:1", "--name", "a", "--insecure-dev", "--data", c.data,
				"--state", filepath.Join(t.TempDir(), "state")}, c.flags...)...)
			done <- err
		}()
		select {
		case err := <-done:
			assertRefused(t, "--data "+c.data, err, "", "--data", c.data, c.want)
		case <-time.After(20 * time.Second):
			t.Fatalf("site --data %s was not refused (it went on to connect)", c.data)
		}
	}
}

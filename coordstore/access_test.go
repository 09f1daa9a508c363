package coordstore

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// asUserEnv, when set, makes TestOpenUnwritableStateNamesIt the child run
// as an unprivileged user: it opens the store in the folder the variable
// names.
const asUserEnv = "COORDSTORE_TEST_UNWRITABLE_STATE"

// TestOpenUnwritableStateNamesIt: a state folder the coordinator's user
// cannot write is refused before SQLite's bare "unable to open database
// file (14)", naming the folder, --state, the user and the permission. As
// root (which may write anything) the check runs in a child as uid 10001
// (the container's user) on a root-owned folder.
func TestOpenUnwritableStateNamesIt(t *testing.T) {
	if dir := os.Getenv(asUserEnv); dir != "" {
		checkUnwritable(t, dir)
		return
	}
	if os.Getuid() != 0 {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		checkUnwritable(t, dir)
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("setpriv (util-linux) is needed to run the check as uid 10001")
		}
		t.Skip("setpriv (util-linux) not found: cannot run the check as uid 10001")
	}
	root, err := os.MkdirTemp("", "coordstore-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	state := filepath.Join(root, "state")
	for _, d := range []string{root, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, "coordstore.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=10001", "--regid=10001", "--clear-groups",
		bin, "-test.run=^TestOpenUnwritableStateNamesIt$", "-test.v")
	cmd.Env = append(os.Environ(), asUserEnv+"="+state)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("as uid 10001: %v\n%s", err, out)
	}
}

func checkUnwritable(t *testing.T, dir string) {
	t.Helper()
	st, err := Open(filepath.Join(dir, "coordinator.db"))
	if err == nil {
		st.Close()
		t.Fatalf("Open in %s (not writable by uid %d) succeeded", dir, os.Getuid())
	}
	msg := err.Error()
	for _, want := range []string{dir, "--state", "permission denied", "uid " + strconv.Itoa(os.Getuid()), "chown"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if strings.Contains(msg, "(14)") {
		t.Errorf("error %q is SQLite's bare code", msg)
	}
}

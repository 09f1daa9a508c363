package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildah runs buildah on the test's own storage (vfs: no kernel overlay
// needed), failing the test with its output.
func buildah(t *testing.T, store string, args ...string) string {
	t.Helper()
	full := append([]string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}, args...)
	out, err := exec.Command("buildah", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAirGappedImage builds deploy/image's image, the one a site without a
// container registry builds, from the test's pfedmma binary with Debian's
// buildah, and runs it with runc: `pfedmma version` works on the libraries
// stage.sh copied, the process runs as uid 10001 (it writes in /state and
// is refused /etc).
func TestAirGappedImage(t *testing.T) {
	for _, tool := range []string{"buildah", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (make deps installs it)", tool)
			}
			t.Skipf("%s is not installed (make deps installs it)", tool)
		}
	}
	bin := testBinary(t)
	tmp := t.TempDir()
	ctx := filepath.Join(tmp, "ctx")
	if out, err := exec.Command("../../deploy/image/stage.sh", bin, ctx).CombinedOutput(); err != nil {
		t.Fatalf("stage.sh: %v\n%s", err, out)
	}
	store := filepath.Join(tmp, "store")
	tag := fmt.Sprintf("localhost/pfedmma-test:%d", time.Now().UnixNano())
	buildah(t, store, "bud", "-q", "-f", "../../deploy/image/Containerfile", "-t", tag, ctx)
	c := strings.TrimSpace(buildah(t, store, "from", "-q", tag))
	defer buildah(t, store, "rm", c)
	run := func(args ...string) (string, error) {
		full := append([]string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs", "run", c, "--", "/usr/local/bin/pfedmma"}, args...)
		out, err := exec.Command("buildah", full...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("version"); err != nil || !strings.Contains(out, "float32 GEMM") || !strings.Contains(out, "libjpeg-turbo") {
		t.Fatalf("pfedmma version in the image: %v\n%s", err, out)
	}
	if out, err := run("certs", "init", "--sites", "a,b", "--dir", "/state/certs"); err != nil {
		t.Fatalf("uid 10001 cannot write in /state: %v\n%s", err, out)
	}
	if out, err := run("certs", "init", "--sites", "a", "--dir", "/etc/certs"); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("the image's process may write in /etc (not uid 10001?): %v\n%s", err, out)
	}
}

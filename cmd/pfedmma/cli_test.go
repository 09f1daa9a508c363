package main

// The CLI tests' harness: execute runs a command line in this process;
// cli runs `pfedmma` as a child process (this test binary re-executed, see
// TestCLIHelperProcess) whose stderr must hold neither "panic:" nor "fatal
// error:"; refused and assertRefused check a refusal's words; snapshot and
// diffSnapshots compare folders.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// resetFlags puts every flag of every command back at its default (cobra
// keeps flag values between Execute calls in one process).
func resetFlags(c *cobra.Command) {
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
		fs.VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				_ = sv.Replace(nil)
			} else {
				_ = f.Value.Set(f.DefValue)
			}
			f.Changed = false
		})
	}
	for _, sub := range c.Commands() {
		resetFlags(sub)
	}
}

// execute runs the command line args in this process with every flag at
// its default (before and after) and returns what it printed.
func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	resetFlags(rootCmd)
	t.Cleanup(func() {
		resetFlags(rootCmd)
		rootCmd.SetOut(nil)
		rootCmd.SetErr(nil)
		rootCmd.SetArgs(nil)
	})
	var buf bytes.Buffer
	rootCmd.SetOut(&buf)
	rootCmd.SetErr(&buf)
	rootCmd.SetArgs(args)
	err := rootCmd.ExecuteContext(context.Background())
	return buf.String(), err
}

// tinyRunArgs are the settings of a small, fast run of the default job.
func tinyRunArgs(model, out string, rounds int) []string {
	return []string{"run", "--quiet", "--out", out, "--set", "model=" + model,
		"--set", "dataset.num_classes=8", "--set", "federation.clients=2",
		"--set", fmt.Sprintf("federation.rounds=%d", rounds), "--set", "federation.eval_every=1",
		"--set", "pfedmma.dim=8"}
}

// slowRunArgs are tinyRunArgs with rounds long enough to be interrupted
// in the middle.
func slowRunArgs(model, out string, rounds int) []string {
	return append(tinyRunArgs(model, out, rounds), "--set", "federation.local_epochs=8")
}

// cliHelperEnv carries the child's command line (JSON) to
// TestCLIHelperProcess.
const cliHelperEnv = "PFEDMMA_CLI_HELPER_ARGS"

// cliMemoryLimit bounds the child's address space, so that an unbounded
// allocation ends as "fatal error: out of memory" in the child (which the
// harness reports) instead of swapping a shared machine.
const cliMemoryLimit = 6 << 30

// TestCLIHelperProcess is not a test: it is the child process of cli (the
// os/exec tests' pattern). Run directly, it returns at once.
func TestCLIHelperProcess(t *testing.T) {
	spec := os.Getenv(cliHelperEnv)
	if spec == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		fmt.Fprintln(os.Stderr, "cli helper:", err)
		os.Exit(2)
	}
	_ = unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: cliMemoryLimit, Max: cliMemoryLimit})
	rootCmd.SetArgs(args)
	main()
	os.Exit(0)
}

// cliResult is what a pfedmma child process did.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

// cliOptions are cli's optional settings.
type cliOptions struct {
	Dir     string        // working folder (default: the test's)
	Timeout time.Duration // default 60 s
	// Signal, when set, is sent to the child after SignalAfter.
	Signal      os.Signal
	SignalAfter time.Duration
	Env         []string
}

// cli runs `pfedmma args...` in a child process and fails the test when it
// prints "panic:" or "fatal error:" on stderr, is killed by a signal other
// than opts.Signal, or outlives opts.Timeout (a hang).
func cli(t *testing.T, opts cliOptions, args ...string) cliResult {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	spec, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCLIHelperProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), cliHelperEnv+"="+string(spec)), opts.Env...)
	cmd.Dir = opts.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if opts.Signal != nil {
		timer := time.AfterFunc(opts.SignalAfter, func() { _ = cmd.Process.Signal(opts.Signal) })
		defer timer.Stop()
	}
	err = cmd.Wait()
	res := cliResult{Stdout: stdout.String(), Stderr: stderr.String()}
	line := "pfedmma " + strings.Join(args, " ")
	if ctx.Err() != nil {
		t.Fatalf("%s: still running after %v (hang)\nstderr: %s", line, opts.Timeout, tail(res.Stderr))
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Errorf("%s: killed by %v\nstderr: %s", line, ws.Signal(), tail(res.Stderr))
		}
	default:
		t.Fatal(err)
	}
	for _, bad := range []string{"panic:", "fatal error:"} {
		if strings.Contains(res.Stderr, bad) {
			t.Errorf("%s: %q on stderr:\n%s", line, bad, tail(res.Stderr))
		}
	}
	return res
}

// tail is the end of a long output.
func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}

// refused runs a bad input and asserts a non-zero exit whose stderr names
// every one of wants.
func refused(t *testing.T, opts cliOptions, wants []string, args ...string) cliResult {
	t.Helper()
	r := cli(t, opts, args...)
	if r.Code == 0 {
		t.Errorf("pfedmma %s: exit 0, want a refusal\nstdout: %s\nstderr: %s", strings.Join(args, " "), tail(r.Stdout), tail(r.Stderr))
		return r
	}
	for _, w := range wants {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("pfedmma %s: stderr does not name %q:\n%s", strings.Join(args, " "), w, tail(r.Stderr))
		}
	}
	return r
}

// snapshot maps every file under dir to its content hash and mode.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			m[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m[rel] = fmt.Sprintf("%x %v %d", sha256.Sum256(b), fi.Mode(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// diffSnapshots lists what changed between two snapshots.
func diffSnapshots(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, "removed "+k)
		} else if w != v {
			d = append(d, "changed "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "added "+k)
		}
	}
	return d
}

// userFolder makes a folder of a user's own files (notes.txt, src/, and a
// config.yaml, the name that once made any folder count as a run).
func userFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{
		"notes.txt":   "my notes",
		"src/main.go": "package main",
		"config.yaml": "name: mine\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cliUntil runs pfedmma args in a child process and sends sig as soon as
// its stderr shows marker; the child is killed if it has not ended 120 s
// later (the caller checks how far it got, which does not depend on the
// machine's load).
func cliUntil(t *testing.T, marker string, sig os.Signal, args ...string) cliResult {
	t.Helper()
	spec, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), cliHelperEnv+"="+string(spec))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	var signalled time.Time
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		stderr.WriteString(sc.Text() + "\n")
		if signalled.IsZero() && strings.Contains(sc.Text(), marker) {
			signalled = time.Now()
			_ = cmd.Process.Signal(sig)
			time.AfterFunc(120*time.Second, func() { _ = cmd.Process.Kill() })
		}
	}
	err = cmd.Wait()
	res := cliResult{Stdout: stdout.String(), Stderr: stderr.String()}
	if signalled.IsZero() {
		t.Fatalf("pfedmma %s never printed %q:\n%s", strings.Join(args, " "), marker, tail(res.Stderr))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.Code = ee.ExitCode()
	}
	for _, bad := range []string{"panic:", "fatal error:"} {
		if strings.Contains(res.Stderr, bad) {
			t.Errorf("%q on stderr:\n%s", bad, tail(res.Stderr))
		}
	}
	return res
}

// assertRefused checks that err is an error holding every want (and no
// Go panic text), and that out was not written.
func assertRefused(t *testing.T, what string, err error, out string, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want an error naming %q", what, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not name %q", what, err, w)
		}
	}
	if out != "" {
		if _, statErr := os.Stat(out); statErr == nil {
			t.Errorf("%s: %s was written although the command failed", what, out)
		}
	}
}

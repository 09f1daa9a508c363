package main

// Tests of issue 18's data-loss, crash and hang families (and issue 17's
// ResNet and FEMNIST defects) that need a real process: each bad input runs
// `pfedmma` as a child process (this test binary re-executed) whose stderr
// must hold neither "panic:" nor "fatal error:".

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

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

// TestForceKeepsUserFiles: `cd DIR && pfedmma run --out . --force` in a
// folder of the user's files (a config.yaml among them) is refused naming
// them, and deletes nothing (before: notes.txt and src/ were deleted).
func TestForceKeepsUserFiles(t *testing.T) {
	model := tinyWorldModel(t)
	dir := userFolder(t)
	before := snapshot(t, dir)
	refused(t, cliOptions{Dir: dir}, []string{"notes.txt", "src", "no " + experiment.RunMarkerFile},
		append(tinyRunArgs(model, ".", 1), "--force")...)
	if d := diffSnapshots(before, snapshot(t, dir)); len(d) > 0 {
		t.Errorf("--force changed the user's folder: %v", d)
	}
}

// TestForceRefusesForeignFilesInRun: a run folder (with its marker) into
// which the user put files of their own is not cleared: --force names the
// foreign files and keeps everything; without them it clears and reruns.
func TestForceRefusesForeignFilesInRun(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if r := cli(t, cliOptions{}, tinyRunArgs(model, out, 1)...); r.Code != 0 {
		t.Fatalf("run: %s", r.Stderr)
	}
	var m experiment.RunMarker
	b, err := os.ReadFile(filepath.Join(out, experiment.RunMarkerFile))
	if err != nil {
		t.Fatalf("the run wrote no marker: %v", err)
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Fingerprint == "" || m.Finished == "" {
		t.Fatalf("marker %s: %+v, %v", b, m, err)
	}
	notes := filepath.Join(out, "notes.txt")
	if err := os.WriteFile(notes, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, out)
	refused(t, cliOptions{}, []string{"notes.txt", "did not write"}, append(tinyRunArgs(model, out, 1), "--force")...)
	if d := diffSnapshots(before, snapshot(t, out)); len(d) > 0 {
		t.Errorf("refused --force changed the run folder: %v", d)
	}
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, cliOptions{}, append(tinyRunArgs(model, out, 1), "--force")...); r.Code != 0 {
		t.Fatalf("--force of a run folder: %s", r.Stderr)
	}
}

// TestResumeFinishedRunChangesNothing: --resume of a finished run says so
// and changes no file, also when a site checkpoint is garbage (before: it
// exited 0 and rewrote the trained adapters).
func TestResumeFinishedRunChangesNothing(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if r := cli(t, cliOptions{}, tinyRunArgs(model, out, 2)...); r.Code != 0 {
		t.Fatalf("run: %s", r.Stderr)
	}
	sites, _ := filepath.Glob(filepath.Join(out, "checkpoints", "pfedmma", "site-*", "*"))
	if len(sites) == 0 {
		t.Fatal("no site checkpoint written")
	}
	for _, corrupt := range []bool{false, true} {
		if corrupt {
			if err := os.WriteFile(sites[0], []byte("garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshot(t, out)
		r := cli(t, cliOptions{}, append(tinyRunArgs(model, out, 2), "--resume")...)
		if r.Code != 0 || !strings.Contains(r.Stderr, "finished") || !strings.Contains(r.Stderr, "changed nothing") {
			t.Errorf("--resume of a finished run (garbage site checkpoint %v): exit %d\n%s", corrupt, r.Code, tail(r.Stderr))
		}
		after := snapshot(t, out)
		delete(before, experiment.LockFile)
		delete(after, experiment.LockFile)
		if d := diffSnapshots(before, after); len(d) > 0 {
			t.Errorf("--resume of a finished run (garbage site checkpoint %v) changed %v", corrupt, d)
		}
	}
}

// TestUnboundedSizesRefused: sizes that once crashed ("fatal error: out of
// memory") or hung are refused at once naming the flag or file.
func TestUnboundedSizesRefused(t *testing.T) {
	vocab := filepath.Join(tinyWorldModel(t), "bpe_simple_vocab_16e6.txt.gz")
	out := filepath.Join(t.TempDir(), "x.safetensors")
	cases := []struct {
		args  []string
		wants []string
	}{
		{[]string{"tokenize", "--vocab", vocab, "--context", "2000000000", "a cat"}, []string{"--context 2000000000"}},
		{[]string{"--threads", "100000", "tokenize", "--vocab", vocab, "a cat"}, []string{"--threads 100000"}},
		{[]string{"pretrain", "--vision-width", "1000000", "--out", filepath.Join(t.TempDir(), "p")}, []string{"--vision-width 1000000"}},
		{[]string{"pretrain", "--batch", "60000", "--vision-width", "8192", "--vision-heads", "64", "--vision-layers", "256", "--out", filepath.Join(t.TempDir(), "p")}, []string{"needs about", "--batch"}},
		{[]string{"preprocess", "--image", "/dev/zero", "--out", out}, []string{"/dev/zero", "character device"}},
		{[]string{"run", "--out", filepath.Join(t.TempDir(), "r"), "--set", "methods=[adapt]", "--set", "adapt.adaln=true", "--set", "adapt.adaln_layers=1000000"}, []string{"adapt.adaln_layers"}},
	}
	// 400 images at --size 4096 (2 × 200 MB each, 160 GB): refused by the
	// memory estimate before any is decoded
	img := writeWorldImage(t, 0)
	many := []string{"preprocess", "--size", "4096", "--out", out}
	linkDir := t.TempDir()
	for i := range 400 {
		p := filepath.Join(linkDir, fmt.Sprintf("i%03d.png", i))
		if err := os.Symlink(img, p); err != nil {
			t.Fatal(err)
		}
		many = append(many, p)
	}
	cases = append(cases, struct {
		args  []string
		wants []string
	}{many, []string{"400 images at --size 4096", "needs about"}})
	for _, c := range cases {
		refused(t, cliOptions{Timeout: 30 * time.Second}, c.wants, c.args...)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("refused preprocess wrote %s", out)
	}
}

// TestFIFOImagesRefused: a FIFO given as --image to zeroshot, embed,
// preprocess or predict is refused at once naming it (before: blocked
// forever, deaf to Ctrl-C).
func TestFIFOImagesRefused(t *testing.T) {
	model := tinyWorldModel(t)
	fifo := filepath.Join(t.TempDir(), "photo.png")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	run := filepath.Join(t.TempDir(), "run")
	if r := cli(t, cliOptions{}, tinyRunArgs(model, run, 1)...); r.Code != 0 {
		t.Fatalf("run: %s", r.Stderr)
	}
	for _, args := range [][]string{
		{"zeroshot", "--model", model, "--classes", "a,b", "--image", fifo},
		{"embed", "--model", model, "--image", fifo},
		{"preprocess", "--image", fifo, "--out", filepath.Join(t.TempDir(), "x.safetensors")},
		{"predict", "--run", run, "--image", fifo},
		// other inputs, through the same check
		{"embed", "--model", model, "--pixels", fifo},
		{"tokenize", "--vocab", fifo, "a cat"},
		{"embed", "--model", model, "--vocab", fifo, "--text", "a cat"},
		{"run", "--config", fifo, "--out", filepath.Join(t.TempDir(), "r")},
	} {
		refused(t, cliOptions{Timeout: 30 * time.Second}, []string{fifo, "FIFO"}, args...)
	}
}

// TestEmbedStopsOnSIGTERM: embed sent SIGTERM while it encodes images stops
// at the next batch with a non-zero exit saying so (before: it ignored the
// signal and encoded every image). Also SIGINT.
func TestEmbedStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	cfg := clip.Config{EmbedDim: 128,
		Vision: clip.VisionConfig{ImageSize: 224, PatchSize: 16, Width: 384, Layers: 8, Heads: 6, MLPWidth: 1536},
		Text:   clip.TextConfig{ContextLength: 16, VocabSize: 500, Width: 64, Layers: 1, Heads: 1, MLPWidth: 256}}
	model := filepath.Join(dir, "model.safetensors")
	if err := checkpoint.Save(model, clip.Random(cfg, 1), checkpoint.OpenAI); err != nil {
		t.Fatal(err)
	}
	const n = 96 // three batches, each of seconds
	px := tensor.New(n, 3, 224, 224)
	for i := range px.Data {
		px.Data[i] = float32(i%17) / 17
	}
	pixels := filepath.Join(dir, "pixels.safetensors")
	if err := safetensors.Write(pixels, tensor.Named{"pixels": px}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Interrupt} {
		r := cliUntil(t, "embed: encoding images", sig, "embed", "--model", model, "--pixels", pixels)
		// It must stop at a batch boundary before the last image, whatever
		// the machine's load (the child is killed 120 s after the signal).
		var done, total int
		i := strings.Index(r.Stderr, "stopped after ")
		if i >= 0 {
			_, _ = fmt.Sscanf(r.Stderr[i:], "stopped after %d of %d images", &done, &total)
		}
		if r.Code == 0 || i < 0 || total != n || done >= n {
			t.Errorf("embed after %v: exit %d, stopped after %d of %d images (want fewer than %d)\n%s", sig, r.Code, done, total, n, tail(r.Stderr))
		}
	}
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

// TestRandomBadFiles: every command that reads a file, given random bytes
// (or a truncated real file) under each accepted extension, exits non-zero
// with a message naming the file, without a panic.
func TestRandomBadFiles(t *testing.T) {
	model := tinyWorldModel(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(18, 2))
	real, err := os.ReadFile(filepath.Join(model, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	contents := [][]byte{nil, []byte("{"), real[:len(real)/3]}
	for range 2 {
		b := make([]byte, 1+r.IntN(4096))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		contents = append(contents, b)
	}
	img := writeWorldImage(t, 1)
	for k, b := range contents {
		file := func(ext string) string {
			p := filepath.Join(dir, fmt.Sprintf("bad%d%s", k, ext))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		for _, args := range [][]string{
			{"inspect", "--model", file(".safetensors")},
			{"inspect", "--model", file(".pt")},
			{"embed", "--model", file(".safetensors"), "--text", "a cat"},
			{"embed", "--model", model, "--pixels", file(".safetensors")},
			{"embed", "--model", model, "--image", file(".png")},
			{"zeroshot", "--model", model, "--classes", "a,b", "--image", file(".jpg")},
			{"zeroshot", "--model", file(".pt"), "--classes", "a,b", "--image", img},
			{"preprocess", "--image", file(".webp"), "--out", filepath.Join(dir, "o.safetensors")},
			{"tokenize", "--vocab", file(".txt.gz"), "a cat"},
			{"tokenize", "--vocab", file(".json"), "a cat"},
			{"run", "--config", file(".yaml"), "--out", filepath.Join(dir, fmt.Sprintf("r%d", k))},
		} {
			// accepted on purpose: an empty config is the default job; a
			// merges file with no merges is a byte-level vocabulary
			// (pretrain --merges 0 writes one)
			if (args[0] == "run" && len(b) == 0) || (args[0] == "tokenize" && k == 1) {
				continue
			}
			refused(t, cliOptions{Timeout: 30 * time.Second}, []string{filepath.Join(dir, "bad")}, args...)
		}
	}
}

// TestResumeKeepsFinishedSeeds: --resume of a run over several seeds that
// stopped in its last seed leaves the seeds that had ended untouched (even
// with a garbage site checkpoint there) and writes the mean over seeds.
func TestResumeKeepsFinishedSeeds(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	args := append(tinyRunArgs(model, out, 1), "--set", "seeds=[1, 2]")
	if r := cli(t, cliOptions{}, args...); r.Code != 0 {
		t.Fatalf("run: %s", tail(r.Stderr))
	}
	// as if stopped during seed 2: no mean summary, the marker not finished
	if err := os.Remove(filepath.Join(out, "summary.json")); err != nil {
		t.Fatal(err)
	}
	if err := experiment.WriteRunMarker(out, experiment.RunMarker{Fingerprint: "stopped"}); err != nil {
		t.Fatal(err)
	}
	seed1 := filepath.Join(out, "seed_1")
	sites, _ := filepath.Glob(filepath.Join(seed1, "checkpoints", "pfedmma", "site-*", "*"))
	if len(sites) == 0 {
		t.Fatal("no site checkpoint in seed_1")
	}
	if err := os.WriteFile(sites[0], []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, seed1)
	r := cli(t, cliOptions{}, append(args, "--resume")...)
	if r.Code != 0 {
		t.Fatalf("resume: %s", tail(r.Stderr))
	}
	if d := diffSnapshots(before, snapshot(t, seed1)); len(d) > 0 {
		t.Errorf("resume changed the finished seed: %v", d)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.json")); err != nil {
		t.Errorf("no mean summary after resume: %v", err)
	}
}

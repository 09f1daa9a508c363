package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/world"
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

// TestInspectRefusesFIFO: inspect on a FIFO (or a model folder holding one)
// fails at once (before: it blocked forever, deaf to Ctrl-C).
func TestInspectRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.safetensors")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, p := range []string{fifo, dir} {
		done := make(chan error, 1)
		go func() { _, err := execute(t, "inspect", "--model", p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "FIFO") {
				t.Errorf("inspect --model %s: error %v, want one naming the FIFO", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("inspect --model %s blocked", p)
		}
	}
}

// TestInspectWithoutModel: inspect with no --model describes the embedded
// model, as the README says (before: "required flag(s) "model" not set").
func TestInspectWithoutModel(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out, err := execute(t, "inspect")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"embedded default model", "parameters", "vision"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
}

// TestRunOutputFolder: a second run into a used --out is refused unless
// --force, which clears the earlier run's files first; --force never clears
// a folder that holds no run; a folder locked by a live run is refused
// naming the holder's pid; a bad name is refused before anything is written.
func TestRunOutputFolder(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 1)...); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(out, "sites", "old", "client_009.safetensors")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// before: silently overwritten, leaving the stale file
	_, err := execute(t, tinyRunArgs(model, out, 1)...)
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second run into %s: error %v", out, err)
	}
	if _, err := execute(t, append(tinyRunArgs(model, out, 1), "--force")...); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("--force left the earlier run's %s", stale)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.json")); err != nil {
		t.Errorf("forced run: %v", err)
	}

	other := t.TempDir()
	keep := filepath.Join(other, "thesis.tex")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = execute(t, append(tinyRunArgs(model, other, 1), "--force")...)
	if err == nil || !strings.Contains(err.Error(), "holds no pfedmma run") {
		t.Errorf("--force into a folder without a run: error %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("--force removed an unrelated file: %v", err)
	}

	// A run holding the lock (here: this process, as a running run would).
	locked := filepath.Join(t.TempDir(), "locked")
	if err := os.MkdirAll(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := experiment.LockRunDir(locked)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file, so a second open in this process
	// conflicts just as another process would.
	_, err = execute(t, tinyRunArgs(model, locked, 1)...)
	unlock()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("run into a locked folder: error %v, want one naming pid %d", err, os.Getpid())
	}

	_, err = execute(t, append(tinyRunArgs(model, filepath.Join(t.TempDir(), "n"), 1), "--set", "name=../../x")...)
	if err == nil || !strings.Contains(err.Error(), "name") {
		t.Errorf("name=../../x: error %v", err)
	}
}

// TestRunResumeMissingCheckpoint: --resume of a run whose checkpoint was
// deleted is refused naming the file (before: it started again from round
// 0 without a word); --force runs it from round 0.
func TestRunResumeMissingCheckpoint(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 2)...); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(out, "checkpoints", "pfedmma", "federation.ckpt")
	if err := os.Remove(ck); err != nil {
		t.Fatal(err)
	}
	// as a run stopped before it ended (a finished run has nothing to resume)
	if err := experiment.WriteRunMarker(out, experiment.RunMarker{Fingerprint: "stopped"}); err != nil {
		t.Fatal(err)
	}
	_, err := execute(t, append(tinyRunArgs(model, out, 2), "--resume")...)
	if err == nil || !strings.Contains(err.Error(), ck) {
		t.Fatalf("resume without checkpoint: error %v, want one naming %s", err, ck)
	}
	if _, err := execute(t, append(tinyRunArgs(model, out, 2), "--resume", "--force")...); err != nil {
		t.Fatal(err)
	}
}

// writeWorldImage writes a rendered world test image of class c as PNG.
func writeWorldImage(t *testing.T, c int) string {
	t.Helper()
	w, _ := world.New(world.DefaultConfig())
	img, err := w.Render(world.Spec{Split: world.TestSplit, Class: w.Classes()[c], Domain: world.Photo}, 48)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), fmt.Sprintf("class%d.png", c))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPredictCommand: the header names the site and the label space;
// --client out of range, --top 0 and an unknown --space are errors; --space
// all ranks every class; several images work; damaged (NaN) adapters are an
// error rather than "NaN%".
func TestPredictCommand(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 1)...); err != nil {
		t.Fatal(err)
	}
	a, b := writeWorldImage(t, 0), writeWorldImage(t, 1)

	got, err := execute(t, "predict", "--run", out, "--client", "1", "--image", a, b, "--top", "2")
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(got, "\n")
	if !strings.Contains(header, "site 1") || !strings.Contains(header, "label space") || !strings.Contains(header, "pfedmma") {
		t.Errorf("header %q does not name the method, site and label space", header)
	}
	if !strings.Contains(got, a) || !strings.Contains(got, b) || strings.Count(got, "%") != 4 {
		t.Errorf("two images, top 2: want 4 ranked lines naming both files:\n%s", got)
	}

	got, err = execute(t, "predict", "--run", out, "--space", "all", "--top", "100", "--image", a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "label space all (8 classes)") || strings.Count(got, "%") != 8 {
		t.Errorf("--space all: want all 8 classes ranked:\n%s", got)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--client", "2"}, "--client 2"},
		{[]string{"--client", "-1"}, "--client -1"},
		{[]string{"--top", "0"}, "--top 0"},
		{[]string{"--space", "nope"}, "--space \"nope\""},
		{[]string{"--method", "nope"}, "nope"},
	} {
		args := append([]string{"predict", "--run", out, "--image", a}, tc.args...)
		if _, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("predict %v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	fifo := filepath.Join(t.TempDir(), "pipe.png")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil {
		if _, err := execute(t, "predict", "--run", out, "--image", fifo); err == nil || !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("predict on a FIFO: error %v", err)
		}
	}
	if _, err := execute(t, "predict", "--image", a); err == nil || !strings.Contains(err.Error(), "--run") {
		t.Errorf("predict without --run: error %v", err)
	}
	if _, err := execute(t, "predict", "--run", out); err == nil || !strings.Contains(err.Error(), "--image") {
		t.Errorf("predict without images: error %v", err)
	}

	help, err := execute(t, "predict", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--image FILE [FILE...]", "--run DIR ", "--space", "all", "--top", "--client"} {
		if !strings.Contains(help, want) {
			t.Errorf("predict --help lacks %q:\n%s", want, help)
		}
	}

	// Damage client 0's adapters: NaN in every saved tensor.
	file := filepath.Join(out, "sites", "pfedmma", "client_000.safetensors")
	f, err := safetensors.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := f.Float32All()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range ts {
		for i := range v.Data {
			v.Data[i] = float32(math.NaN())
		}
	}
	if err := safetensors.Write(file, ts, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, err = execute(t, "predict", "--run", out, "--client", "0", "--image", a)
	if err == nil || !strings.Contains(err.Error(), "not finite") || strings.Contains(got, "NaN%") {
		t.Errorf("predict with NaN adapters: error %v, output:\n%s", err, got)
	}
}

// TestSIGTERMStopsAndResumes: `pfedmma run` sent SIGTERM mid-run exits with
// an error saying how to resume; --resume then finishes with the summary an
// uninterrupted run has.
func TestSIGTERMStopsAndResumes(t *testing.T) {
	bin, tmp := testBinary(t), t.TempDir()
	model := tinyWorldModel(t)
	const rounds = 6
	full := filepath.Join(tmp, "full")
	if b, err := exec.Command(bin, slowRunArgs(model, full, rounds)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, b)
	}

	part := filepath.Join(tmp, "part")
	cmd := exec.Command(bin, slowRunArgs(model, part, rounds)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var wg sync.WaitGroup
	wg.Add(1)
	sent := false
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		var t0 time.Time
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "method=pfedmma round=0 ") {
				t0 = time.Now()
			}
			// a third of the way into pfedmma's third round
			if !sent && strings.Contains(sc.Text(), "method=pfedmma round=1 ") {
				sent = true
				go func(d time.Duration) {
					time.Sleep(d / 3)
					_ = cmd.Process.Signal(syscall.SIGTERM)
				}(time.Since(t0))
			}
		}
	}()
	wg.Wait()
	err = cmd.Wait()
	if !sent {
		t.Fatalf("the run ended before the signal could be sent:\n%s", log.String())
	}
	if err == nil {
		t.Fatalf("run ended with exit 0 after SIGTERM:\n%s", log.String())
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	t.Logf("interrupted run ended with: %s", lines[len(lines)-1])
	if !strings.Contains(log.String(), "--resume --out "+part) {
		t.Fatalf("interrupted run does not say how to resume:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(part, "summary.json")); err == nil {
		t.Fatalf("interrupted run wrote a summary")
	}
	if b, err := exec.Command(bin, append(slowRunArgs(model, part, rounds), "--resume")...).CombinedOutput(); err != nil {
		t.Fatalf("resume: %v\n%s", err, b)
	}
	sa, err := report.ReadSummary(filepath.Join(full, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := report.ReadSummary(filepath.Join(part, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"zeroshot", "pfedmma"} {
		ma, _ := sa.Get(m)
		mb, _ := sb.Get(m)
		if len(ma) == 0 || len(ma) != len(mb) {
			t.Fatalf("%s: metrics %v vs %v", m, ma, mb)
		}
		for k, v := range ma {
			if mb[k] != v {
				t.Errorf("%s %s: resumed %v, uninterrupted %v", m, k, mb[k], v)
			}
		}
	}
}

// TestLoadModelRefusesNaN: the CLI's model loader (embed, zeroshot, …)
// refuses NaN weights naming the tensor.
func TestLoadModelRefusesNaN(t *testing.T) {
	dir := tinyWorldModel(t)
	file := filepath.Join(dir, "model.safetensors")
	w, _, err := checkpoint.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	w.Text.Proj[5] = float32(math.NaN())
	if err := checkpoint.Save(file, w, checkpoint.OpenAI); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadModel(dir, "", true); err == nil || !strings.Contains(err.Error(), "text_projection") {
		t.Fatalf("NaN model: error %v, want one naming text_projection", err)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/testmodel"
	"github.com/pfedmma/pfedmma/rundir"
	"github.com/pfedmma/pfedmma/world"
)

// tinyWorldModel writes a small random CLIP with a vocabulary learned from
// world class prompts.
func tinyWorldModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testmodel.Write(dir, 24, 7); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRunAndPredictCommands(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"run", "--quiet", "--out", out, "--set", "model=" + model,
		"--set", "dataset.num_classes=8", "--set", "federation.clients=2", "--set", "federation.rounds=2",
		"--set", "pfedmma.dim=8"}
	var buf bytes.Buffer
	rootCmd.SetOut(&buf)
	rootCmd.SetArgs(args)
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"zeroshot", "pfedmma", "Local", "HM"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("run output lacks %q:\n%s", want, buf.String())
		}
	}
	for _, f := range []string{"config.yaml", "fingerprint.txt", "run.json", "summary.json", "report.md", "curves.png", "sites/pfedmma/client_001.safetensors"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatalf("run output %s: %v", f, err)
		}
	}

	// resume with a different configuration is refused
	rootCmd.SetArgs(append(append([]string{}, args...), "--resume", "--set", "federation.rounds=3", "--set", "seed=99"))
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "configuration differs") {
		t.Fatalf("resume with another config: error %v", err)
	}

	// predict with client 1's adapters on a rendered world image
	w, _ := world.New(world.DefaultConfig())
	img, err := w.Render(world.Spec{Split: world.TestSplit, Class: w.Classes()[0], Domain: world.Photo}, 48)
	if err != nil {
		t.Fatal(err)
	}
	imgPath := filepath.Join(t.TempDir(), "x.png")
	f, _ := os.Create(imgPath)
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	buf.Reset()
	rootCmd.SetArgs([]string{"predict", "--run", out, "--client", "1", "--image", imgPath, "--top", "3"})
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "%"); lines != 3 {
		t.Fatalf("predict printed %d ranked classes, want 3:\n%s", lines, buf.String())
	}
	rootCmd.SetArgs([]string{"predict", "--run", out, "--client", "7", "--image", imgPath})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "--client 7") {
		t.Fatalf("predict for a missing client: error %v", err)
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
	unlock, err := rundir.Lock(locked)
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

// TestForceKeepsUserFiles: `cd DIR && pfedmma run --out . --force` in a
// folder of the user's files (a config.yaml among them) is refused naming
// them, and deletes nothing (before: notes.txt and src/ were deleted).
func TestForceKeepsUserFiles(t *testing.T) {
	model := tinyWorldModel(t)
	dir := userFolder(t)
	before := snapshot(t, dir)
	refused(t, cliOptions{Dir: dir}, []string{"notes.txt", "src", "no " + rundir.RunMarkerFile},
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
	var m rundir.RunMarker
	b, err := os.ReadFile(filepath.Join(out, rundir.RunMarkerFile))
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

// TestOutFolderRefused: preprocess and step given a folder as --out are
// refused naming --out and the folder, before any work (before: "rename
// …: file exists").
func TestOutFolderRefused(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step") })
	dir := t.TempDir()
	img := writeWorldImage(t, 0)
	_, err := execute(t, "preprocess", "--image", img, "--out", dir)
	assertRefused(t, "preprocess --out FOLDER", err, "", "--out", dir, "folder")
	const td = "../../testdata/"
	_, err = execute(t, "step", "--method", "pfedmma", "--model", td+"clip-tiny/openai.safetensors",
		"--params", td+"mma-l2/adapters_init.safetensors", "--batch", td+"mma-l2/step.safetensors", "--out", dir)
	assertRefused(t, "step --out FOLDER", err, "", "--out", dir, "folder")
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%s: %d entries left behind", dir, len(entries))
	}
}

// TestDefaultRunFolder: without --out, two runs started in the same second
// get two folders, and a run failing before it wrote anything resumable
// leaves no folder behind (before: the second run failed asking for
// --resume although no --out was given).
func TestDefaultRunFolder(t *testing.T) {
	t.Chdir(t.TempDir())
	model := tinyWorldModel(t)
	for range 2 {
		_, err := execute(t, "run", "--quiet", "--set", "model="+model, "--set", "dataset.image_size=7")
		assertRefused(t, "dataset.image_size=7", err, "", "dataset.image_size")
		if err != nil && strings.Contains(err.Error(), "--resume") {
			t.Errorf("a run without --out asks for --resume: %v", err)
		}
	}
	if entries, _ := os.ReadDir("runs"); len(entries) != 0 {
		t.Errorf("failed runs left %d folders in runs/", len(entries))
	}
	a, err := rundir.NewDefault("same")
	if err != nil {
		t.Fatal(err)
	}
	b, err := rundir.NewDefault("same")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("two runs of one name got one folder %s", a)
	}
	for _, d := range []string{a, b} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("folder %s not created: %v", d, err)
		}
	}
}

// TestPFedMoAPGateWidthMessage: a gate width that does not divide the
// model's feature dimension is reported under its config key, gate_width of
// the pfedmoap section (before:
// "gating_embed_dim 24: must divide the feature dim", the fixture's name).
func TestPFedMoAPGateWidthMessage(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	_, err := execute(t, append(tinyRunArgs(model, out, 1), "--set", "methods=[pfedmoap]", "--set", "pfedmoap.gate_width=23",
		"--set", "pfedmoap.gate_heads=1", "--set", "pfedmoap.num_experts=2")...)
	assertRefused(t, "pfedmoap.gate_width=23", err, "", "pfedmoap: gate_width", "23")
}

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

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

// badFiles writes the kinds of bad input file the property test feeds to
// every command: random bytes, an empty file, a truncated safetensors file,
// a safetensors header announcing 1 TiB, a tensor pointing beyond its
// file, JSON of the wrong shape, a PNG signature followed by junk, and a
// folder where a file is expected.
func badFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	rng := rand.New(rand.NewPCG(18, 3))
	random := make([]byte, 777)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	valid, err := os.ReadFile("../../testdata/mma-l2/step.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	hdr := `{"a":{"dtype":"F32","shape":[1000000000],"data_offsets":[0,4000000000]}}`
	beyond := append(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))), hdr...)
	files := map[string][]byte{
		"random": random, "empty": {}, "truncated": valid[:len(valid)/3], "huge-header": append(huge, '{'),
		"beyond": append(beyond, 1, 2, 3, 4), "json": []byte(`{"x": [1, 2, {"y": null}], "round": "five"}`),
		"png-junk": append([]byte("\x89PNG\r\n\x1a\n"), random[:200]...),
	}
	out := map[string]string{}
	for name, b := range files {
		p := filepath.Join(dir, name+".bad")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	out["folder"] = t.TempDir()
	return out
}

// TestEveryCommandRefusesBadFiles is the property test of issue 18: every
// command given a bad file wherever it reads one exits non-zero, within a
// minute, and without a Go panic or fatal error (no "panic:", "fatal
// error:" or goroutine dump on stderr).
func TestEveryCommandRefusesBadFiles(t *testing.T) {
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	bin, tmp := testBinary(t), t.TempDir()
	td, err := filepath.Abs("../../testdata")
	if err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	model := filepath.Join(td, "clip-tiny", "openai.safetensors")
	goodRun := filepath.Join(tmp, "good-run")
	if b, err := exec.Command(bin, tinyRunArgs(tinyWorldModel(t), goodRun, 1)...).CombinedOutput(); err != nil {
		t.Fatalf("a good run for predict: %v\n%s", err, b)
	}
	goodSummary := `{"protocol": "base2novel", "metrics": ["local"], "methods": {"pfedmma": {"local": 50}}}`
	goodMetrics := `{"round":0,"method":"pfedmma","mean":{"local":50}}` + "\n"
	// each command line, with F where the bad file goes; a command whose
	// file sits in a folder gets the folder from its setup
	type command struct {
		name  string
		args  []string
		setup func(t *testing.T, bad string) []string
	}
	inDir := func(file, companion, content string) func(t *testing.T, bad string) []string {
		return func(t *testing.T, bad string) []string {
			dir := t.TempDir()
			b, err := os.ReadFile(bad)
			if err != nil { // the folder case: the file is a folder
				if err := os.Mkdir(filepath.Join(dir, file), 0o755); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if companion != "" {
				if err := os.WriteFile(filepath.Join(dir, companion), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return []string{dir}
		}
	}
	commands := []command{
		{"inspect --model", []string{"inspect", "--model", "F"}, nil},
		{"embed --model", []string{"embed", "--model", "F", "--text", "a cat"}, nil},
		{"embed --image", []string{"embed", "--image", "F"}, nil},
		{"embed --pixels", []string{"embed", "--pixels", "F"}, nil},
		{"zeroshot --image", []string{"zeroshot", "--classes", "a,b", "--image", "F"}, nil},
		{"zeroshot --model", []string{"zeroshot", "--model", "F", "--classes", "a,b", "--image", img}, nil},
		{"preprocess --image", []string{"preprocess", "--image", "F", "--out", filepath.Join(tmp, "pre.safetensors")}, nil},
		{"tokenize --vocab", []string{"tokenize", "--vocab", "F", "a cat"}, nil},
		{"step --params", []string{"step", "--method", "pfedmma", "--model", model, "--params", "F",
			"--batch", filepath.Join(td, "mma-l2/step.safetensors"), "--out", filepath.Join(tmp, "s.safetensors")}, nil},
		{"step --batch", []string{"step", "--method", "pfedmma", "--model", model, "--params",
			filepath.Join(td, "mma-l2/adapters_init.safetensors"), "--batch", "F", "--out", filepath.Join(tmp, "s.safetensors")}, nil},
		{"round --batch", []string{"round", "--method", "pfedmma", "--model", model, "--params",
			filepath.Join(td, "mma-l2/adapters_init.safetensors"), "--batch", "F", "--out", filepath.Join(tmp, "r.safetensors")}, nil},
		{"run --config", []string{"run", "--quiet", "--config", "F", "--out", filepath.Join(tmp, "run")}, nil},
		{"predict run.json", []string{"predict", "--image", img, "--run"}, inDir("run.json", "", "")},
		{"predict --image", []string{"predict", "--run", goodRun, "--image", "F"}, nil},
		{"embed --vocab", []string{"embed", "--vocab", "F", "--text", "a cat"}, nil},
		{"zeroshot --vocab", []string{"zeroshot", "--vocab", "F", "--classes", "a,b", "--image", img}, nil},
		{"run --model", []string{"run", "--quiet", "--model", "F", "--out", filepath.Join(tmp, "run-model")}, nil},
		{"report summary.json", []string{"report"}, inDir("summary.json", "metrics.jsonl", goodMetrics)},
		{"report metrics.jsonl", []string{"report"}, inDir("metrics.jsonl", "summary.json", goodSummary)},
	}
	bad := badFiles(t, tmp)
	for _, c := range commands {
		for kind, path := range bad {
			if c.name == "run --config" && kind == "empty" {
				continue // an empty config file means the defaults, by design (config.Compose)
			}
			t.Run(c.name+"/"+kind, func(t *testing.T) {
				args := slices.Clone(c.args)
				if c.setup != nil {
					args = append(args, c.setup(t, path)...)
				} else {
					for i, a := range args {
						if a == "F" {
							args[i] = path
						}
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Dir = t.TempDir()
				cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(tmp, "cache"))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				switch {
				case ctx.Err() != nil:
					t.Fatalf("pfedmma %s: still running after a minute", strings.Join(args, " "))
				case err == nil:
					t.Errorf("pfedmma %s: exit 0 on a bad file", strings.Join(args, " "))
				}
				for _, bad := range []string{"panic:", "fatal error:", "goroutine "} {
					if strings.Contains(stderr.String(), bad) {
						t.Errorf("pfedmma %s: %q on stderr:\n%s", strings.Join(args, " "), bad, stderr.String())
					}
				}
			})
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/checkpoint"
)

func TestInspectOutput(t *testing.T) {
	for _, path := range []string{"../../testdata/clip-tiny/openai.safetensors", "../../testdata/clip-tiny/hf"} {
		info, err := checkpoint.Inspect(path)
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		if err := writeInspectText(&text, path, info); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"1,768,065", "ViT 32×32 px, patch 8 (4×4 grid, 17 tokens)",
			"context 77, vocab 1000", "width 128, 4 layers, 2 heads (head dim 64), MLP 512", string(info.Scheme)} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("%s: text output lacks %q:\n%s", path, want, text.String())
			}
		}
		var js bytes.Buffer
		if err := writeInspectJSON(&js, path, info); err != nil {
			t.Fatal(err)
		}
		var got inspectJSON
		if err := json.Unmarshal(js.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Params != 1768065 || got.VisionParams+got.TextParams != got.Params || got.EmbedDim != 64 ||
			got.Vision.Heads != 2 || got.Text.VocabSize != 1000 || got.LogitScale != 4 || got.Scheme != info.Scheme {
			t.Errorf("%s: JSON %+v", path, got)
		}
	}
}

func TestGroupDigits(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1768065: "1,768,065", 149620737: "149,620,737"} {
		if got := groupDigits(n); got != want {
			t.Errorf("groupDigits(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestModelFolderWithoutModelNamesIt: a --model folder holding no model
// file, but a FIFO no loader opens, is refused for the missing model, not
// for the FIFO (before: "pipe: a named pipe (FIFO), not a regular file").
func TestModelFolderWithoutModelNamesIt(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"inspect", "--model", dir}, {"embed", "--model", dir, "--text", "a cat"}} {
		done := make(chan error, 1)
		go func() { _, err := execute(t, args...); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "no .safetensors file") || strings.Contains(err.Error(), "FIFO") {
				t.Errorf("%v: error %v, want one saying the folder holds no model file", args, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%v blocked", args)
		}
	}
}

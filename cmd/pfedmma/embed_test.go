package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestEmbedPixelsMatchesFixture runs `pfedmma embed --pixels` on the
// clip-tiny fixture in both name schemes and compares with PyTorch.
func TestEmbedPixelsMatchesFixture(t *testing.T) {
	fx, err := safetensors.Open("../../testdata/clip-tiny/forward.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	images, err := fx.Float32("images")
	if err != nil {
		t.Fatal(err)
	}
	want, err := fx.Float32("image_features")
	if err != nil {
		t.Fatal(err)
	}
	px := filepath.Join(t.TempDir(), "pixels.safetensors")
	if err := safetensors.Write(px, tensor.Named{"pixels": images}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"../../testdata/clip-tiny/openai.safetensors", "../../testdata/clip-tiny/hf"} {
		var out bytes.Buffer
		rootCmd.SetOut(&out)
		rootCmd.SetArgs([]string{"embed", "--model", model, "--pixels", px})
		if err := rootCmd.Execute(); err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		var got struct {
			Image [][]float32 `json:"image_features"`
			Text  [][]float32 `json:"text_features"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: output %q: %v", model, out.String(), err)
		}
		if len(got.Image) != 3 || len(got.Text) != 0 {
			t.Fatalf("%s: got %d image and %d text rows, want 3 and 0", model, len(got.Image), len(got.Text))
		}
		for i, row := range got.Image {
			for j, v := range row {
				ref := want.Data[i*64+j]
				if d := math.Abs(float64(v - ref)); d > 1e-4*(1+math.Abs(float64(ref))) {
					t.Fatalf("%s: image_features[%d][%d] = %v, want %v", model, i, j, v, ref)
				}
			}
		}
	}
}

func TestEmbedBadPixels(t *testing.T) {
	px := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := safetensors.Write(px, tensor.Named{"pixels": tensor.New(1, 3, 16, 16)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	rootCmd.SetArgs([]string{"embed", "--model", "../../testdata/clip-tiny/openai.safetensors", "--pixels", px})
	err := rootCmd.Execute()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("[1 3 16 16]")) {
		t.Fatalf("error %v, want one naming the shape", err)
	}
}

// TestEmbedNaNPixels: --pixels holding NaN or ±Inf is refused naming the
// file, the value, its index and image (before: "json: unsupported value:
// NaN" after encoding).
func TestEmbedNaNPixels(t *testing.T) {
	const model = "../../testdata/clip-tiny/openai.safetensors"
	w, _, err := checkpoint.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	S := w.Config.Vision.ImageSize
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		px := filepath.Join(t.TempDir(), "nan.safetensors")
		img := tensor.New(2, 3, S, S)
		img.Data[3*S*S+5] = bad
		if err := safetensors.Write(px, tensor.Named{"pixels": img}, nil, nil); err != nil {
			t.Fatal(err)
		}
		_, err := execute(t, "embed", "--model", model, "--pixels", px)
		if err == nil {
			t.Fatalf("embed accepted %v pixels", bad)
		}
		for _, want := range []string{px, `"pixels"`, fmt.Sprint(bad), fmt.Sprintf("index %d (image 1)", 3*S*S+5), "finite"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "json") {
			t.Errorf("error %q speaks of JSON", err)
		}
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

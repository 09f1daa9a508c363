package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
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

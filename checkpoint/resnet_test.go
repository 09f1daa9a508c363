package checkpoint

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/safetensors"
)

// TestResNetCLIP loads the clip-rn-tiny fixture (OpenAI names, BatchNorm
// statistics, num_batches_tracked) through the ordinary loader and
// reproduces its image features, text features and logits.
func TestResNetCLIP(t *testing.T) {
	const dir = "../testdata/clip-rn-tiny/"
	w, info, err := Load(dir + "openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Config.Vision.ResNet || info.Config.Vision.ImageSize != 64 || info.Config.EmbedDim != 32 || info.Config.Text.Layers != 2 {
		t.Fatalf("config %+v", info.Config)
	}
	f, err := safetensors.Open(dir + "forward.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := clip.New(w)
	img, _ := f.Float32("images")
	tok64, _, err := f.Int64("tokens")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int, len(tok64))
	for i, v := range tok64 {
		tokens[i] = int(v)
	}
	B, C := img.Shape[0], len(tokens)/77
	gotImg := m.EncodeImage(img.Data, B)
	gotTxt, err := m.EncodeText(tokens, C)
	if err != nil {
		t.Fatal(err)
	}
	logits := clip.Logits(append([]float32(nil), gotImg...), append([]float32(nil), gotTxt...), B, C, 32, w.LogitScale)
	for name, got := range map[string][]float32{"image_features": gotImg, "text_features": gotTxt, "logits_per_image": logits} {
		want, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want.Data {
			if d := math.Abs(float64(got[i] - want.Data[i])); !(d <= 1e-4*(1+math.Abs(float64(want.Data[i])))) {
				t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want.Data[i])
			}
		}
	}
}

package checkpoint

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestInspectOutput(t *testing.T) {
	for _, path := range []string{"../testdata/clip-tiny/openai.safetensors", "../testdata/clip-tiny/hf"} {
		info, err := Inspect(path)
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		if err := info.WriteText(&text, path); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"1,768,065", "ViT 32×32 px, patch 8 (4×4 grid, 17 tokens)",
			"context 77, vocab 1000", "width 128, 4 layers, 2 heads (head dim 64), MLP 512", string(info.Scheme)} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("%s: text output lacks %q:\n%s", path, want, text.String())
			}
		}
		var js bytes.Buffer
		if err := info.WriteJSON(&js, path); err != nil {
			t.Fatal(err)
		}
		var got infoJSON
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

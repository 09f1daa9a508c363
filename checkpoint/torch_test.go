package checkpoint

import (
	"archive/zip"
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/torchpt"
)

const (
	jitFixture       = "../testdata/clip-tiny/jit.pt"
	stateDictFixture = "../testdata/clip-tiny/state_dict.pt"
	forwardFixture   = "../testdata/clip-tiny/forward.safetensors"
)

// byName maps the OpenAI tensor names of w to its buffers.
func byName(w *clip.Weights) map[string][]float32 {
	ls := []float32{w.LogitScale}
	out := map[string][]float32{}
	for _, p := range layout(w.Config, OpenAI, w, ls) {
		out[p.name] = p.dst
	}
	return out
}

// TestLoadTorchScript loads the TorchScript fixture (OpenAI's .pt format,
// fp16/fp32 mix): every tensor must equal openai.safetensors, rounded to
// float16 where the archive stores float16.
func TestLoadTorchScript(t *testing.T) {
	want, _, err := Load(openaiFixture)
	if err != nil {
		t.Fatal(err)
	}
	got, info, err := Load(jitFixture)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config != tinyConfig || info.Scheme != OpenAI || info.Tensors != 110 {
		t.Fatalf("config %s scheme %s tensors %d, want %s openai 110", describe(got.Config), info.Scheme, info.Tensors, describe(tinyConfig))
	}
	if strings.Join(info.DTypes, ",") != "F16,F32" || len(info.Files) != 1 || info.Files[0] != jitFixture {
		t.Errorf("info dtypes %v files %v", info.DTypes, info.Files)
	}
	pt, err := torchpt.Open(jitFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer pt.Close()
	if !pt.TorchScript() {
		t.Error("jit.pt not recognised as TorchScript")
	}
	half := 0
	wantBy, gotBy := byName(want), byName(got)
	gotBy["logit_scale"] = []float32{got.LogitScale}
	for name, w := range wantBy {
		dt, _, ok := pt.Info(name)
		if !ok {
			t.Fatalf("jit.pt lacks %q", name)
		}
		g := gotBy[name]
		for i, v := range w {
			if dt == "F16" {
				v = safetensors.HalfToFloat32(safetensors.Float32ToHalf(v))
			}
			if g[i] != v {
				t.Fatalf("%s (%s) [%d]: got %v, want %v", name, dt, i, g[i], v)
			}
		}
		if dt == "F16" {
			half++
		}
	}
	if half != 67 || len(wantBy)-half != 43 {
		t.Errorf("%d float16 and %d float32 tensors, want 67 and 43", half, len(wantBy)-half)
	}
}

// TestLoadStateDict loads torch.save(model.state_dict()): exactly the
// tensors of openai.safetensors.
func TestLoadStateDict(t *testing.T) {
	want, _, err := Load(openaiFixture)
	if err != nil {
		t.Fatal(err)
	}
	got, info, err := Load(stateDictFixture)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(info.DTypes, ",") != "F32" {
		t.Errorf("dtypes %v, want F32", info.DTypes)
	}
	if err := Equal(got, want); err != nil {
		t.Fatal(err)
	}
	if inf, err := Inspect(stateDictFixture); err != nil || inf.Config != tinyConfig || inf.LogitScale != want.LogitScale {
		t.Errorf("Inspect: %v %+v", err, inf)
	}
}

// forward runs clip-tiny on the fixture inputs and returns the image
// features, text features and logits.
func forward(t *testing.T, w *clip.Weights, fx *safetensors.File) (img, txt, logits []float32) {
	t.Helper()
	images, err := fx.Float32("images")
	if err != nil {
		t.Fatal(err)
	}
	tok64, _, err := fx.Int64("tokens")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int, len(tok64))
	for i, v := range tok64 {
		tokens[i] = int(v)
	}
	m := clip.New(w)
	img = m.EncodeImage(images.Data, 3)
	if txt, err = m.EncodeText(tokens, 4); err != nil {
		t.Fatal(err)
	}
	return img, txt, clip.Logits(img, txt, 3, 4, w.Config.EmbedDim, w.LogitScale)
}

// maxRel is max |got−want| / (1 + |want|).
func maxRel(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	worst := 0.0
	for i := range want {
		d := math.Abs(float64(got[i]-want[i])) / (1 + math.Abs(float64(want[i])))
		if d > worst || math.IsNaN(d) {
			worst = d
		}
	}
	return worst
}

// TestTorchForward runs both PyTorch fixtures through the model. The
// state dict is the float32 model: forward.safetensors within the
// README's 1e-4. The TorchScript archive holds float16-rounded weights:
// it must give exactly the outputs of openai.safetensors rounded to
// float16 the same way, and stay near the float32 fixture.
func TestTorchForward(t *testing.T) {
	fx, err := safetensors.Open(forwardFixture)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"image_features", "text_features", "logits_per_image"}
	sd, _, err := Load(stateDictFixture)
	if err != nil {
		t.Fatal(err)
	}
	out := [3][]float32{}
	out[0], out[1], out[2] = forward(t, sd, fx)
	for i, n := range names {
		want, err := fx.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxRel(out[i], want.Data); d > 1e-4 {
			t.Errorf("state_dict.pt %s: max relative error %.3g, tolerance 1e-4", n, d)
		}
	}

	jit, _, err := Load(jitFixture)
	if err != nil {
		t.Fatal(err)
	}
	rounded, _, err := Load(openaiFixture)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := torchpt.Open(jitFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer pt.Close()
	for name, buf := range byName(rounded) {
		if dt, _, _ := pt.Info(name); dt == "F16" {
			for i, v := range buf {
				buf[i] = safetensors.HalfToFloat32(safetensors.Float32ToHalf(v))
			}
		}
	}
	got, want := [3][]float32{}, [3][]float32{}
	got[0], got[1], got[2] = forward(t, jit, fx)
	want[0], want[1], want[2] = forward(t, rounded, fx)
	for i, n := range names {
		if d := maxRel(got[i], want[i]); d != 0 {
			t.Errorf("jit.pt %s: differs from the fp16-rounded safetensors model by %.3g", n, d)
		}
		ref, _ := fx.Float32(n)
		// fp16 weights (11-bit mantissa) move the outputs by ~1e-3.
		if d := maxRel(got[i], ref.Data); d > 5e-3 {
			t.Errorf("jit.pt %s: max relative error %.3g from the float32 fixture, want ≤ 5e-3", n, d)
		} else {
			t.Logf("jit.pt %s: %.3g from the float32 fixture", n, d)
		}
	}
}

// TestTorchHFFolder puts the state dict in a folder as pytorch_model.bin.
func TestTorchHFFolder(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(stateDictFixture)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	w, info, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := Load(openaiFixture)
	if err := Equal(w, want); err != nil || info.Files[0] != filepath.Join(dir, "pytorch_model.bin") {
		t.Errorf("pytorch_model.bin folder: %v, files %v", err, info.Files)
	}
	// Any extension: a zip archive is read as a PyTorch checkpoint.
	other := filepath.Join(dir, "weights.model")
	os.WriteFile(other, b, 0o644)
	if _, _, err := Load(other); err != nil {
		t.Errorf("zip archive with extension .model: %v", err)
	}
}

// rewriteZip copies a zip archive, letting edit change each record's bytes
// (nil drops the record).
func rewriteZip(t *testing.T, src string, edit func(name string, b []byte) []byte) []byte {
	t.Helper()
	zr, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b = edit(f.Name, b); b == nil {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTorchErrors damages the state dict fixture in one way per case; each
// load must fail with an error naming the file (and the tensor where one
// is at fault).
func TestTorchErrors(t *testing.T) {
	dir := t.TempDir()
	orig, err := os.ReadFile(stateDictFixture)
	if err != nil {
		t.Fatal(err)
	}
	// The record of visual.conv1.weight's storage, found by its size.
	conv := ""
	{
		zr, _ := zip.NewReader(bytes.NewReader(orig), int64(len(orig)))
		for _, f := range zr.File {
			if strings.Contains(f.Name, "/data/") && f.UncompressedSize64 == 128*3*8*8*4 {
				conv = f.Name
			}
		}
	}
	if conv == "" {
		t.Fatal("no storage record of 128·3·8·8 floats in state_dict.pt")
	}
	crc := bytes.Clone(orig)
	{
		// Flip one byte of conv1's data in place: the CRC no longer matches.
		zr, _ := zip.NewReader(bytes.NewReader(orig), int64(len(orig)))
		for _, f := range zr.File {
			if f.Name == conv {
				off, err := f.DataOffset()
				if err != nil {
					t.Fatal(err)
				}
				crc[off+100] ^= 0xff
			}
		}
	}
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"crc", "checksum", crc},
		{"missing storage", "missing storage record", rewriteZip(t, stateDictFixture, func(n string, b []byte) []byte {
			if n == conv {
				return nil
			}
			return b
		})},
		{"short storage", "holds 98300 bytes, want 98304", rewriteZip(t, stateDictFixture, func(n string, b []byte) []byte {
			if n == conv {
				return b[:len(b)-4]
			}
			return b
		})},
		{"no data.pkl", "no <archive>/data.pkl", rewriteZip(t, stateDictFixture, func(n string, b []byte) []byte {
			if strings.HasSuffix(n, "data.pkl") {
				return nil
			}
			return b
		})},
		{"legacy", "legacy", []byte("\x80\x02\x8a\x0alegacy")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".pt")
			os.WriteFile(p, c.data, 0o644)
			_, _, err := Load(p)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err %v, want %q and the path", err, c.want)
			}
			if c.name != "legacy" && c.name != "no data.pkl" && !strings.Contains(err.Error(), "visual.conv1.weight") {
				t.Errorf("err %v does not name the tensor", err)
			}
		})
	}
}

// TestTorchTruncated cuts both fixtures at many points; each load must
// fail cleanly and name the file.
func TestTorchTruncated(t *testing.T) {
	dir := t.TempDir()
	for _, src := range []string{jitFixture, stateDictFixture} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		cut := filepath.Join(dir, "cut.pt")
		for _, n := range []int{0, 1, 4, 30, 100, 1000, len(data) / 3, len(data) / 2, len(data) - 100, len(data) - 22, len(data) - 1} {
			os.WriteFile(cut, data[:n], 0o644)
			if _, _, err := Load(cut); err == nil {
				t.Errorf("%s cut at %d of %d bytes loaded", src, n, len(data))
			} else if !strings.Contains(err.Error(), cut) {
				t.Errorf("%s cut at %d: error %q does not name the file", src, n, err)
			}
		}
	}
}

// TestOpenAIScalarBuffers: the input_resolution, context_length and
// vocab_size scalars of OpenAI's .pt files are ignored, not "unexpected".
func TestOpenAIScalarBuffers(t *testing.T) {
	src, err := safetensors.Open(openaiFixture)
	if err != nil {
		t.Fatal(err)
	}
	all, err := src.Float32All()
	if err != nil {
		t.Fatal(err)
	}
	i64 := map[string]safetensors.Int64Tensor{
		"input_resolution": {Shape: []int{}, Data: []int64{32}},
		"context_length":   {Shape: []int{}, Data: []int64{77}},
		"vocab_size":       {Shape: []int{}, Data: []int64{1000}},
	}
	p := filepath.Join(t.TempDir(), "with_scalars.safetensors")
	if err := safetensors.Write(p, all, i64, nil); err != nil {
		t.Fatal(err)
	}
	got, info, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := Load(openaiFixture)
	if err := Equal(got, want); err != nil || info.Tensors != 110 {
		t.Errorf("%v, %d tensors", err, info.Tensors)
	}
}
